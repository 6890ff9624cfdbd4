"""The thesis's comparison on this CPU: farm-tuned TVM against untuned TVM and its peers (onnxruntime,
PyTorch eager and torch.compile, TVM's own tuning pipeline), each kernel's share of the box's peak beside.

Each case is MODEL:BATCH[:TRIALS_PER_TASK]. For each, the farm tunes it (an embedded `farm
submit` into --registry: answered from the registry when it already holds the library; with
--retune it tunes again, the search warm-started from the records already there and its own
merged into them, so a later run adds trials instead of starting over). Then, in this one
process, every engine runs the same network with the same seeded weights on the same seeded
input: untuned TVM (the farm's reference build), the farm-tuned library (loaded with
farm.load), onnxruntime (the zoo's Relax graph re-emitted as ONNX, bench/relax_graph.py) and
PyTorch eager and torch.compile (the same graph as torch calls; only when torch is installed:
VENV=.venv-bench EXTRAS=test,torch scripts/setup, kept apart since torch slows every `import tvm`)
and, with --tvm-pipeline, TVM's own `relax.pipeline.static_shape_tuning_pipeline` tuned at the
same trials (bench/tvm_pipeline.py says how it is called; its build is kept under
--tvm-pipeline-work and reused by a later run of the same budget). Every output is checked against
untuned TVM first (bench/timing.py states the tolerance), with the seeded weights and again with
the constant-initialised ones (BatchNorm, LayerNorm, biases) perturbed, which would let a mis-wired
graph pass. Then warm-up, and the timed runs interleaved round-robin. Last, the farm-tuned library
and TVM's pipeline run --kernel-runs more inferences with every call timed (bench/vm_calls.py):
each kernel's time in the model, GFLOP/s and share of this box's peak (the fingerprint's measured
peak_gflops, or the fastest rate a kernel reached on it, alone (the fingerprint's best records) or in
the model, where that is higher: `peak_from` says which). Results go to OUT/evaluate-TAG.json, .csv and
-kernels.csv, with three plots: latency per case (one bar per engine), the model's best latency against
trials, and the heaviest kernels' share of the peak.

    .venv/bin/python bench/evaluate.py resnet-18:1:16 mobilenet:1:16 --tag quick
    .venv/bin/python bench/evaluate.py resnet-18:1:16 --retune --tag more   # 16 more per task
    .venv-bench/bin/python bench/evaluate.py resnet-18:1:32 --tvm-pipeline --tag peers-quick

Exit codes: 0 done; 1 an engine disagreed with the reference, or a tuning job failed;
2 bad arguments; 3 --no-tune and the registry holds no library for a case.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kernel_rates import fastest_kernels  # noqa: E402
from peer_engines import TORCH_COMPILE, TVM_PIPELINE, torch_compile_engine, tvm_pipeline_engine  # noqa: E402
from timing import Engine, check_outputs, cpu_model, interleaved, load_average  # noqa: E402
from vm_calls import (  # noqa: E402
    kernel_rows,
    model_function_flops,
    peak_gflops_of,
    reached_peak,
    time_calls,
    with_shares_of,
)

SYSTEMS = ("TVM untuned", "TVM farm-tuned", "onnxruntime", "PyTorch eager", TORCH_COMPILE, TVM_PIPELINE)
PEERS = ("onnxruntime", "PyTorch eager", TORCH_COMPILE, TVM_PIPELINE)
# The fingerprint's fastest kernels alone kept in a case's report: the evidence of a peak above the probe's.
FASTEST_SHOWN = 3
EXIT_DISAGREE, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3


class Refused(Exception):
    def __init__(self, message: str, hint: str, code: int):
        super().__init__(message)
        self.hint, self.code = hint, code


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    trials_per_task: int | None

    @property
    def label(self) -> str:
        return f"{self.model} b{self.batch}"

    @staticmethod
    def parse(text: str, default_trials: int | None) -> Case:
        parts = text.split(":")
        try:
            if not 1 <= len(parts) <= 3 or not parts[0]:
                raise ValueError
            batch = int(parts[1]) if len(parts) > 1 else 1
            trials = int(parts[2]) if len(parts) > 2 else default_trials
            if batch < 1 or (trials is not None and trials < 1):
                raise ValueError
        except ValueError:
            raise Refused(f"bad case {text!r}", "write MODEL:BATCH[:TRIALS_PER_TASK], e.g. resnet-18:1:16",
                          EXIT_USAGE) from None
        return Case(parts[0], batch, trials)


def farm_executable() -> str:
    beside = Path(sys.executable).with_name("farm")
    return str(beside) if beside.exists() else "farm"


def tune(case: Case, target: str, registry: str | None, retune: bool, weights_layout: str | None, log) -> None:
    """Run the embedded `farm submit`; its progress goes to our stderr."""
    command = [farm_executable(), "submit", case.model, target, str(case.batch)]
    if weights_layout:
        command += ["--weights-layout", weights_layout]
    if case.trials_per_task is not None:
        command += ["--trials-per-task", str(case.trials_per_task)]
    if registry:
        command += ["--registry", registry]
    if retune:
        command.append("--retune")
    log(f"$ {' '.join(command)}")
    done = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        raise Refused(f"farm submit for {case.label} exited {done.returncode}",
                      "see its message above; `farm jobs` lists the job", EXIT_DISAGREE)


def perturbed(weights: list[np.ndarray], specs) -> list[np.ndarray]:
    """Constant-initialised weights (norm scales and shifts, biases) made random, others kept."""
    rng = np.random.default_rng(1234)
    out = []
    for spec, w in zip(specs, weights):
        if spec.fill is not None and spec.fill.kind == "const" and np.dtype(spec.dtype).kind == "f":
            w = (w * rng.uniform(0.5, 1.5, w.shape) + rng.normal(0.0, 0.1, w.shape)).astype(w.dtype)
        out.append(w)
    return out


def tvm_engine(name: str, library, weights, note: str, runs: int | None = None) -> Engine:
    library.set_weights(weights)
    return Engine(name, run=lambda x: library(x), note=note, runs=runs, set_weights=library.set_weights,
                  sample_ms=lambda x: library.time(x, runs=1, warmup=0).median_ms)


def ort_engine(model, weights, target_kind: str) -> tuple[Engine | None, str]:
    import onnxruntime as ort
    from relax_graph import to_onnx

    provider = "CUDAExecutionProvider" if target_kind == "cuda" else "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        return None, f"onnxruntime {ort.__version__} has no {provider} (pip install onnxruntime-gpu): skipped"
    names = [spec.name for spec in model.inputs]
    holder = []

    def load(w) -> None:
        session = ort.InferenceSession(to_onnx(model.mod, w).SerializeToString(), providers=[provider])
        holder[:] = [session]

    load(weights)

    def run(x):
        return holder[0].run(None, dict(zip(names, x)))

    return Engine("onnxruntime", run, note=f"onnxruntime {ort.__version__}, {provider}, default "
                                          "session options (all graph optimizations, intra-op threads = cores)",
                  set_weights=load), ""


def torch_engine(model, weights, target_kind: str) -> tuple[Engine | None, str]:
    try:
        import torch
    except ImportError:
        return None, "PyTorch not installed (pip install -e .[torch]): skipped"
    from relax_graph import TorchEager

    device = "cuda" if target_kind == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device: skipped"
    torch.set_num_threads(os.cpu_count() or 1)
    eager = TorchEager(model.mod, weights, device)
    return Engine("PyTorch eager", eager, note=f"torch {torch.__version__} on {device}, no_grad, "
                                               f"set_num_threads({torch.get_num_threads()})",
                  set_weights=eager.set_weights, sample_ms=eager.time_ms), ""


def tuning_history(store, model_id: str, fingerprint: str, target_json: str) -> dict:
    """Every tuning job of this model here, oldest first, and the model's best estimate against trials."""
    from farm.report import job_report

    jobs = [j for j in store.list_jobs(limit=10_000)
            if j.model_id == model_id and not j.cache_hit and j.fingerprint_id == fingerprint
            and j.target == target_json and j.state == "succeeded"]
    jobs.sort(key=lambda j: j.created_at)
    curve, offset, listed = [], 0, []
    best: dict[int, float] = {}  # each workload's best mean so far, over this model's jobs
    for job in jobs:
        seconds = (job.finished_at - job.started_at).total_seconds() if job.finished_at and job.started_at else None
        listed.append({"job": job.id, "trials": job.trials_done, "budget": job.trials_budget,
                       "wall_s": seconds, "options": job.options})
        try:
            report = job_report(store, job.id)
        except Exception as err:  # a job whose records are gone still counts its trials
            listed[-1]["curve_error"] = str(err)
            offset += job.trials_done
            continue
        curve += _carried_curve(store, job.id, report.tasks, best, offset)
        offset += report.trials
    return {"jobs": listed, "trials": offset, "curve_trials_ms": curve}


def _carried_curve(store, job_id: str, tasks, best: dict[int, float], offset: int) -> list[tuple[int, float]]:
    """The model's estimate (ms) after each of the job's trials, its tasks' bests carried over from
    earlier jobs (a retune starts from what the registry had: its own report's curve would begin
    only once every task, the capped small ones too, got a valid measurement in that job)."""
    import math

    weights = {t.workload_id: t.weight for t in tasks if t.workload_id is not None}
    curve = []
    for count, (workload_id, mean_sec) in enumerate(store.records.job_measurements(job_id), start=1):
        if mean_sec is not None and math.isfinite(mean_sec) and mean_sec < best.get(workload_id, math.inf):
            best[workload_id] = mean_sec
        if weights and all(w in best for w in weights):
            curve.append((offset + count, sum(best[w] * weight for w, weight in weights.items()) * 1e3))
    return curve


def evaluate_case(case: Case, args, log) -> dict:
    import farm
    from farm.session import open_context
    from foundation.compile import build_library
    from foundation.errors import NotFound
    from foundation.models.loading import load_model
    from foundation.runtime.library_runner import LoadedLibrary

    load_before = load_average()
    model = load_model(case.model, case.batch)
    weights = model.make_weights(0)
    inputs = model.make_inputs(0)
    try:
        deployed = farm.load(case.model, args.target, batch=case.batch, registry=args.registry, weights=weights,
                             weights_layout=args.weights_layout)
    except NotFound as missing:
        raise Refused(missing.problem,
                      f"run without --no-tune, or `farm submit {case.model} {args.target} {case.batch}`",
                      EXIT_NOT_FOUND) from None
    ctx = open_context(args.registry, args.target)
    kind = ctx.target["kind"]
    if not all(np.array_equal(a, b) for a, b in zip(inputs, deployed.example_inputs(0))):
        raise Refused(f"{case.label}: the zoo's seeded input differs from the stored model's",
                      "the zoo changed since it was tuned: tune it again", EXIT_DISAGREE)
    artifact = deployed.artifact
    history = tuning_history(ctx.store, deployed.model.id, ctx.fingerprint.id, ctx.target_json)

    log(f"{case.label}: building untuned TVM (the reference) ...")
    begin = time.perf_counter()
    untuned_library = LoadedLibrary(build_library(model, ctx.tvm_target(), None), kind)
    build_s = time.perf_counter() - begin
    engines = [
        tvm_engine("TVM untuned", untuned_library, weights, f"TVM's default schedules, built here in {build_s:.0f} s",
                   runs=args.untuned_runs),
        tvm_engine("TVM farm-tuned", deployed.library, weights, f"artifact {artifact.id} (farm.load)"),
    ]
    skipped = {}
    peers = [("onnxruntime", lambda: ort_engine(model, weights, kind)),
             ("PyTorch eager", lambda: torch_engine(model, weights, kind))]
    if not args.no_torch_compile:
        peers.append((TORCH_COMPILE, lambda: torch_compile_engine(model, weights, kind)))
    pipeline = None
    if args.tvm_pipeline:
        pipeline = pipeline_engine(case, history["trials"], ctx, args.tvm_pipeline_work, kind, weights, log)
        peers.append((TVM_PIPELINE, lambda: pipeline[:2]))
    for name, make in peers:
        engine, why = make()
        if engine is not None:
            engines.append(engine)
        else:
            skipped[name] = why
            log(f"{case.label}: {why}")

    agreement = {}
    for title, w in (("seeded weights", weights), ("perturbed constant weights", perturbed(weights, model.weights))):
        for engine in engines:
            engine.set_weights(w)
        reference = engines[0].run(inputs)
        checks = [check_outputs(e.run(inputs), reference, e.name) for e in engines[1:]]
        agreement[title] = [vars(c) for c in checks]
        bad = [c for c in checks if not c.passed]
        if bad:
            detail = "; ".join(f"{c.engine}: max|diff| {c.max_abs:.3g} ({c.worst_rel:.3g} of scale) {c.detail}"
                               for c in bad)
            raise Refused(f"{case.label}: outputs disagree with untuned TVM ({title}): {detail}",
                          "an engine computes another function; nothing was timed", EXIT_DISAGREE)
    for engine in engines:
        engine.set_weights(weights)
    log(f"{case.label}: all outputs agree with untuned TVM; timing {len(engines)} engines interleaved ...")
    if args.untuned_runs == 0:
        engines = engines[1:]
    samples = interleaved(engines, inputs, args.runs, args.warmup, args.rounds, log)
    import tvm

    stats = {e.name: {**samples[e.name].summary(), "note": e.note} for e in engines}
    tuned = stats["TVM farm-tuned"]["median_ms"]
    others = {n: stats[n]["median_ms"] for n in PEERS if n in stats}
    fastest = min(others, key=others.get) if others else None
    ort_ms = stats.get("onnxruntime", {}).get("median_ms")
    kernels = {}
    if args.kernel_runs > 0:
        from foundation.domain.weights_layout import WeightsLayout

        log(f"{case.label}: every call timed, {args.kernel_runs} inferences per TVM library ...")
        flops = model_function_flops(model, ctx.tvm_target(), WeightsLayout(artifact.weights_layout))
        kernels["TVM farm-tuned"] = kernel_rows(time_calls(deployed.library, inputs, args.kernel_runs), flops)
        if pipeline is not None and pipeline[0] is not None:
            info = pipeline[2]
            kernels[TVM_PIPELINE] = kernel_rows(time_calls(info["library"], inputs, args.kernel_runs), info["flops"])
    return {
        "model": case.model, "batch": case.batch, "trials_per_task_asked": case.trials_per_task,
        "artifact": {"id": artifact.id, "job": artifact.job_id, "weights_layout": artifact.weights_layout,
                     "recorded_median_ms": artifact.latency_median_ms},
        "tuning": history,
        "untuned_build_s": build_s,
        "tvm_threads": tvm.get_global_func("runtime.NumThreads")(),
        "target": ctx.target,
        "skipped": skipped,
        "agreement": agreement,
        "engines": stats,
        "tvm_pipeline": ({k: v for k, v in pipeline[2].items() if k in ("summary", "work")}
                         if pipeline is not None and pipeline[2] is not None else None),
        "probe_gflops": peak_gflops_of(ctx.fingerprint),  # the box's peak and the shares: `with_box_peak`
        "fastest_alone": fastest_kernels(ctx.store, ctx.fingerprint.id)[:FASTEST_SHOWN],
        "kernels": kernels,
        "ratios": {
            "tuned_over_onnxruntime": tuned / ort_ms if ort_ms else None,
            "fastest_peer": fastest,
            "tuned_over_best_reference": tuned / others[fastest] if others else None,
            "untuned_over_tuned": (stats["TVM untuned"]["median_ms"] / tuned) if "TVM untuned" in stats else None,
        },
        "loadavg_before": load_before, "loadavg_after": load_average(),
    }


def pipeline_engine(case: Case, trials: int, ctx, work_root: Path, kind: str, weights, log):
    """TVM's pipeline for ``case`` (peer_engines.tvm_pipeline_engine) at the farm's total trials for the
    model here and the case's per-task cap (the farm's default where it names none), or why not. A model
    tuned over several jobs (--retune) gives the pipeline every job's trials but one job's cap."""
    from foundation.meta_schedule.tuner import DEFAULT_TRIALS_PER_TASK

    if trials < 1:
        return None, "the farm ran no trials for this model here (a registry hit from elsewhere): no budget " \
                     "to give TVM's pipeline; skipped", None
    try:
        return tvm_pipeline_engine(case.model, case.batch, trials, case.trials_per_task or DEFAULT_TRIALS_PER_TASK,
                                   ctx.target_json, work_root, kind, weights, log)
    except RuntimeError as err:
        raise Refused(f"{case.label}: TVM's pipeline failed: {err}", "see its output above", EXIT_DISAGREE) from None


def with_box_peak(results: list[dict]) -> list[dict]:
    """``results`` (one a case) with the box's peak and each kernel's share of it: the probe's, or the
    fastest rate any case's kernel reached (in a library timed here, or alone: the fingerprint's best
    records, its pack's too) where that is higher. One peak for every case: they ran on one box."""
    rates = {}
    for case in results:
        label = f"{case['model']} b{case['batch']}"
        rates.update({f"{row['kernel']} ({label}, {engine}'s library)": row["gflops"]
                      for engine, rows in case["kernels"].items() for row in rows if row["gflops"]})
        rates.update({f"workload {k['workload_id']} {k['shapes']} alone": k["gflops"] for k in case["fastest_alone"]})
    probe = max((case["probe_gflops"] for case in results if case["probe_gflops"]), default=None)
    peak = reached_peak(probe, rates)
    for case in results:
        case.update(peak)
        for rows in case["kernels"].values():
            with_shares_of(rows, peak["peak_gflops"])
    return results


def write_kernels_csv(path: Path, report: dict) -> None:
    fields = ["model", "batch", "engine", "kernel", "calls", "ms", "share_of_model", "gflop_per_call", "gflops",
              "share_of_peak"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for case in report["cases"]:
            for engine, rows in case["kernels"].items():
                for row in rows:
                    writer.writerow({"model": case["model"], "batch": case["batch"], "engine": engine, **row})


def write_csv(path: Path, report: dict) -> None:
    fields = ["model", "batch", "trials", "engine", "runs", "median_ms", "p10_ms", "p90_ms", "q1_ms", "q3_ms",
              "mean_ms", "min_ms", "max_ms"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for case in report["cases"]:
            for engine, s in case["engines"].items():
                writer.writerow({"model": case["model"], "batch": case["batch"], "trials": case["tuning"]["trials"],
                                 "engine": engine, **s})


def main(argv: list[str] | None = None) -> int:
    from foundation.domain.weights_layout import WeightsLayout

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="MODEL:BATCH[:TRIALS_PER_TASK], e.g. resnet-18:1:16 bert:1:6")
    parser.add_argument("--target", default="llvm",
                        help="llvm (this CPU, the default) or cuda (engines on the GPU; tune it with agents)")
    parser.add_argument("--trials-per-task", type=int, default=None,
                        help="for cases that name none (default: the farm's, 32)")
    parser.add_argument("--retune", action="store_true",
                        help="tune again though the registry has a library (adds trials; records merge)")
    parser.add_argument("--no-tune", action="store_true", help="time what the registry holds; tune nothing")
    parser.add_argument("--weights-layout", default=None, choices=[form.value for form in WeightsLayout],
                        help="the form to tune and time (plain, prepacked, prepacked-nchwc; default: the farm's "
                             "default to tune, the newest library of any form to time)")
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per engine")
    parser.add_argument("--untuned-runs", type=int, default=5, help="timed runs of untuned TVM (slow; 0: check only)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per engine first")
    parser.add_argument("--rounds", type=int, default=5, help="rotated round-robin rounds the runs are split into")
    parser.add_argument("--no-torch-compile", action="store_true",
                        help="leave torch.compile out (its first call compiles for minutes on a large model)")
    parser.add_argument("--tvm-pipeline", action="store_true",
                        help="also tune and time TVM's own static_shape_tuning_pipeline at the farm's trials")
    parser.add_argument("--tvm-pipeline-work", type=Path, default=Path(tempfile.gettempdir()) / "farm-tvm-pipeline",
                        help="where TVM's pipeline keeps its logs and library, one folder per model and budget "
                             "(a later run of the same budget reuses it)")
    parser.add_argument("--kernel-runs", type=int, default=10,
                        help="inferences with every call timed, for each kernel's share of the peak (0: none)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results", help="directory for JSON, CSV, PNG")
    parser.add_argument("--tag", default="evaluation", help="file stem: OUT/evaluate-TAG.{json,csv}")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document on stdout")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        if args.runs < 1 or args.untuned_runs < 0 or args.warmup < 0 or args.rounds < 1 or args.kernel_runs < 0:
            raise Refused("--runs and --rounds must be at least 1, --warmup, --untuned-runs and --kernel-runs "
                          "at least 0",
                          "pass positive counts", EXIT_USAGE)
        if args.retune and args.no_tune:
            raise Refused("--retune and --no-tune contradict each other", "pass one of them", EXIT_USAGE)
        cases = [Case.parse(text, args.trials_per_task) for text in args.cases]
        from foundation.models.zoo import ZOO

        unknown = [c.model for c in cases if c.model not in ZOO]
        if unknown:
            raise Refused(f"unknown model {unknown[0]!r}", f"zoo models: {', '.join(ZOO)}", EXIT_USAGE)
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise Refused(f"cannot create {args.out}: {err.strerror}", "pass a writable --out", EXIT_USAGE) from None

        started = datetime.datetime.now(datetime.timezone.utc)
        load_start = load_average()
        if not args.no_tune:
            for case in cases:
                tune(case, args.target, args.registry, args.retune, args.weights_layout, log)

        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

        pin_tvm_threads()
        install_lean_tensor_intrinsics("cuda" if args.target.startswith("cuda") or '"cuda"' in args.target
                                       else "llvm")
        from foundation.errors import FarmError

        try:
            results = with_box_peak([evaluate_case(case, args, log) for case in cases])
        except FarmError as err:  # a registry that cannot be opened, a target the farm refuses
            raise Refused(err.problem, err.fix or "see above", err.exit_code) from None
    except Refused as refused:
        print(f"error: {refused} ({refused.hint})", file=sys.stderr)
        return refused.code

    import onnxruntime
    import tvm

    report = {
        "command": " ".join([Path(sys.argv[0]).name if argv is None else "evaluate.py", *(argv or sys.argv[1:])]),
        "date_utc": started.isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_start": load_start, "loadavg_end": load_average()},
        "versions": {"tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "timing": {"runs": args.runs, "untuned_runs": args.untuned_runs, "warmup": args.warmup,
                   "rounds": args.rounds},
        "cases": results,
    }
    stem = args.out / f"evaluate-{args.tag}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    write_csv(stem.with_suffix(".csv"), report)
    kernels_csv = args.out / f"evaluate-{args.tag}-kernels.csv"
    write_kernels_csv(kernels_csv, report)
    written = [stem.with_suffix(".json"), stem.with_suffix(".csv"), kernels_csv]
    if not args.no_plots:
        from evaluate_plots import plot_latency, plot_peak_share, plot_trials

        written.append(plot_latency(report, args.out / f"evaluate-{args.tag}-latency.png"))
        written.append(plot_trials(report, args.out / f"evaluate-{args.tag}-trials.png"))
        if any(case["kernels"] for case in report["cases"]):
            written.append(plot_peak_share(report, args.out / f"evaluate-{args.tag}-peak.png"))
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print_table(report)
    log("wrote " + ", ".join(str(p) for p in written))
    return 0


def print_table(report: dict) -> None:
    m = report["machine"]
    print(f"{m['cpu']} ({m['logical_cpus']} logical CPUs), {report['date_utc']}, load average "
          f"{m['loadavg_start'][0]} at start, {m['loadavg_end'][0]} at end")
    for case in report["cases"]:
        t = case["tuning"]
        print(f"\n{case['model']} batch {case['batch']}: {t['trials']} trials in {len(t['jobs'])} tuning job(s), "
              f"artifact {case['artifact']['id']}, TVM threads {case['tvm_threads']}, "
              f"load {case['loadavg_before'][0]} -> {case['loadavg_after'][0]}")
        print(f"  {'engine':16s} {'median':>9s} {'p10':>9s} {'p90':>9s} {'IQR':>8s} {'runs':>5s}  (ms)")
        for name, s in case["engines"].items():
            print(f"  {name:16s} {s['median_ms']:9.4g} {s['p10_ms']:9.4g} {s['p90_ms']:9.4g} {s['iqr_ms']:8.3g}"
                  f" {s['runs']:5d}  {s['note']}")
        r = case["ratios"]
        ratios = [f"farm-tuned / onnxruntime = {r['tuned_over_onnxruntime']:.2f}x" if r["tuned_over_onnxruntime"]
                  else "", f"farm-tuned / fastest peer ({r['fastest_peer']}) = {r['tuned_over_best_reference']:.2f}x"
                  if r["tuned_over_best_reference"] else "",
                  f"untuned / farm-tuned = {r['untuned_over_tuned']:.1f}x" if r["untuned_over_tuned"] else ""]
        print("  " + "; ".join(text for text in ratios if text))
        for why in case["skipped"].values():
            print(f"  {why}")
        print_kernels(case, top=6)


def print_kernels(case: dict, top: int) -> None:
    """The heaviest kernels of each profiled TVM library, with their share of the box's peak."""
    peak = case["peak_gflops"]
    for engine, rows in case["kernels"].items():
        where = f"{peak:.0f} GFLOP/s: {case.get('peak_from', 'the probe')}" if peak else "unknown"
        print(f"  {engine}, heaviest kernels in the model (peak {where}):")
        for row in rows[:top]:
            speed = (f"{row['gflops']:7.1f} GFLOP/s" + (f" {row['share_of_peak']:6.1%} of peak"
                                                       if row["share_of_peak"] is not None else "")
                     if row["gflops"] is not None else "")
            print(f"    {row['kernel'][:52]:52s} {row['ms']:8.3f} ms x{row['calls']:<3.0f} "
                  f"{row['share_of_model']:6.1%} of the model  {speed}")


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
