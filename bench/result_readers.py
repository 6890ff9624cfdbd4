"""The readers of docs/results/'s raw files: one file in (a bench script's JSON, or bench/compare.py's
printed report), the figures a table of docs/benchmarks.md shows out (bench/results_page.py)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable


def read_compare_text(text: str) -> dict:
    """bench/compare.py's printed report: trials, the farm-tuned and onnxruntime medians."""
    trials = re.search(r": (\d+) tuning trials", text)
    farm = re.search(r"^\s+TVM farm-tuned\s+([\d.]+)", text, re.MULTILINE)
    ort = re.search(r"^\s+onnxruntime \(default threads\)\s+([\d.]+)", text, re.MULTILINE)
    if not (trials and farm and ort):
        raise ValueError("not a bench/compare.py report")
    return {"trials": int(trials.group(1)), "farm_ms": float(farm.group(1)), "ort_ms": float(ort.group(1))}


def read_quick_start(raw: dict) -> dict:
    """bench/record_pack.py's cold submit and bench/compare.py's medians, as kept by hand in one JSON."""
    cold = raw["cold"]
    return {"trials": cold["trials"], "wall_s": cold["wall_s"], "farm_ms": cold["farm_ms"], "ort_ms": cold["ort_ms"],
            "date": raw["date"]}


def read_cache_flush_warm(raw: dict) -> dict:
    """bench/cache_flush.py's warm side: the farm's default timing, i.e. a plain `farm submit`."""
    whole = raw["whole_ms"]
    return {"trials": raw["tunes"]["warm"]["trials"], "wall_s": raw["tunes"]["warm"]["wall_s"],
            "farm_ms": whole["warm"]["median"], "ort_ms": whole["onnxruntime"]["median"], "date": raw["date"]}


def read_evaluate(raw: dict) -> dict:
    case = raw["cases"][0]
    return {"trials": case["tuning"]["trials"], "farm_ms": case["engines"]["TVM farm-tuned"]["median_ms"],
            "ort_ms": case["engines"]["onnxruntime"]["median_ms"], "ratio": case["ratios"]["tuned_over_onnxruntime"],
            "date": raw["date_utc"], "model": case["model"], "batch": case["batch"]}


PEER_ENGINES = ("onnxruntime", "PyTorch eager", "torch.compile", "TVM pipeline")


def read_peers(raw: dict) -> list[dict]:
    """bench/evaluate.py's report, one row per case: each engine's median, the farm against the fastest
    peer, and the farm's heaviest kernel in the model with its share of the box's peak."""
    rows = []
    for case in raw["cases"]:
        engines = case["engines"]
        heaviest = next((k for k in case.get("kernels", {}).get("TVM farm-tuned", [])
                         if k.get("share_of_peak") is not None), None)
        rows.append({"case": f"{case['model']} b{case['batch']}", "trials": case["tuning"]["trials"],
                     "farm_ms": engines["TVM farm-tuned"]["median_ms"],
                     "peers_ms": {name: engines[name]["median_ms"] if name in engines else None
                                  for name in PEER_ENGINES},
                     "fastest_peer": case["ratios"].get("fastest_peer"),
                     "ratio": case["ratios"]["tuned_over_best_reference"],
                     "heaviest": heaviest, "peak_gflops": case.get("peak_gflops"), "date": raw["date_utc"]})
    return rows


def read_between(raw: dict) -> dict:
    """bench/between_kernels.py's report: the share of the model between its tuned kernels, and of what."""
    categories = raw["categories"]
    return {"case": f"{raw['model']} b{raw['batch']}", "form": raw["weights_layout"],
            "whole_ms": raw["whole_model_median_ms"], "share": raw["between_share_of_whole"],
            "parts": {name: categories[name]["share_of_whole"] for name in categories if name != "tuned kernels"},
            "date": raw["date_utc"]}


def read_in_model(raw: dict, alone: str = "warm") -> list[dict]:
    """bench/in_model_ratio.py's report: each side's heavy kernels, in the model against alone, timed
    warm or (``alone="context"``) in the side's own context, where 1.0 says the context predicts the model."""
    sides = []
    for name, side in raw["sides"].items():
        ratios = [(k["share"], k[f"ratio_{alone}"]) for k in side["kernels"] if k.get("tuned", True)]
        sides.append({"case": f"{raw['model']} b{raw['batch']}", "side": name, "context": side["context"],
                      "kernels": len(ratios), "kernels_ms": side["kernels_ms"],
                      "within": sum(r <= 1.15 for _share, r in ratios),
                      "weighted_ratio": sum(share * r for share, r in ratios) / sum(share for share, _r in ratios),
                      "worst": max(r for _share, r in ratios), "date": raw["date_utc"]})
    return sides


def read_model_cost(raw: dict) -> dict:
    """bench/trial_cost.py's job: the cost model's share of its tuning (prediction in the evolutionary
    search and updates after each batch) and the refresh after the job."""
    scopes, stages = raw["metaschedule_scopes_s"], raw["stages_s"]
    model_s = (scopes.get("EvoSearch/Evolve/PredictNormalizedScore", 0.0)
               + scopes.get("MeasureCallback/UpdateCostModel", 0.0))
    return {"trials": raw["trials"], "wall_s": raw["wall_s"], "tuning_s": stages["running"], "model_s": model_s,
            "share": model_s / stages["running"], "after_s": stages.get("learned", 0.0),
            # MetaSchedule's feature extraction within it (trial_cost.py's ExtractionClock; older runs lack it)
            "extraction_s": raw["cost_model"].get("feature_extraction_s"),
            "extracted": raw["cost_model"].get("candidates_extracted"),
            "latency_ms": raw["artifact_latency_ms"], "date": raw.get("date", "")}


def read_ceiling(raw: dict) -> list[dict]:
    """Each task's speed as a share of onnxruntime's kernel, the last timing at each trial count."""
    tasks = []
    for task in raw["tasks"]:
        by_trials: dict[int, float] = {}
        for point in task["curve"]:
            by_trials[point["trials"]] = task["onnxruntime"]["ms"] / point["ms"]
        tasks.append({"task": task["task"], "curve": sorted(by_trials.items())})
    return tasks


def read_warm_start(raw: dict) -> dict:
    pairs, donor, model = raw["pairs"], raw["donor"], raw["model"]
    if "packs" in donor:  # --donor-packs: warm from packs of other CPU kinds
        pair = f"packs ({', '.join(name.removesuffix('.farmpack') for name in donor['packs'])}) -> " \
               f"{model['model']} b{model['batch']}"
        budget = f"{model['trials_per_task']} a task"
    else:
        pair = f"{donor['model']} b{donor['batch']} -> b{model['batch']}"
        budget = f"donor {donor['trials']} trials; {model['trials_per_task']} a task"
    # A seed whose warm run never reached cold's final counts as all of cold's trials and more.
    shares = [p["share_of_cold_trials"] if p["share_of_cold_trials"] is not None else float("inf") for p in pairs]
    return {"pair": pair, "budget": budget,
            "share": statistics.median(shares),
            "estimated": statistics.median(p["estimated_ratio"] for p in pairs),
            "timed": statistics.median(p["measured_ratio"] for p in pairs),
            "seeds": len(pairs), "date": raw["date"]}


def _seed_ratio(raw: dict) -> tuple[float, str]:
    return raw["seeds"][0]["ratio"], raw["date"]


def _ratio(raw: dict) -> tuple[float, str]:
    return raw["ratio"], raw["date"]


def _flushed_over_warm(raw: dict) -> tuple[float, str]:
    return raw["flushed_over_warm"], raw["date"]


def _trials_per_s(raw: list) -> tuple[float, str]:
    """bench/trial_cost.py's runs, the old way first; its JSON carries no date (the index gives it)."""
    before, after = raw[0]["trials_per_s_tuning"], raw[-1]["trials_per_s_tuning"]
    return after / before, ""


def _two_over_one(raw: dict) -> tuple[float, str]:
    """bench/plan_ab.py's pairs: the median of two phases' latency over one phase's, pair by pair."""
    return statistics.median(raw["two_over_one_by_pair"]), raw["date"]


def _context_over_warm(*raws: dict) -> tuple[float, str]:
    """bench/cache_flush.py's pairs, of one run or pooled over several: the median of the context's
    latency over warm's, pair by pair, and the last run's date."""
    return statistics.median(r for raw in raws for r in raw["context_over_warm_by_pair"]), raws[-1]["date"]


DEFAULT_READERS: dict[str, Callable] = {"seed_ratio": _seed_ratio, "ratio": _ratio,
                                        "flushed_over_warm": _flushed_over_warm, "trials_per_s": _trials_per_s,
                                        "two_over_one": _two_over_one, "context_over_warm": _context_over_warm}


def read_cost_model_transfer(raw: dict) -> dict:
    """bench/cost_model_transfer.py's JSON: each model's means over the held-out fingerprints."""
    return {"models": raw["summary"], "fingerprints": raw["fingerprints"], "conditions": raw["conditions"],
            "own_share": raw["own_share"], "date": raw["date"]}
