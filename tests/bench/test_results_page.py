"""bench/results_page.py: the committed docs/benchmarks.md is what it generates from docs/results/."""

import json
import re
from pathlib import Path

import pytest
import result_readers
import results_format
import results_kernels
import results_page

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_what_the_script_generates():
    assert (ROOT / "docs" / "benchmarks.md").read_text() == results_page.render(), (
        "docs/benchmarks.md is stale: run .venv/bin/python bench/results_page.py --write")


def test_the_page_stays_under_600_lines():
    assert results_page.render().count("\n") < 600


def test_every_raw_result_the_index_or_the_page_names_exists():
    index = results_format.load_index()
    named = {name for rows in index.values() if isinstance(rows, list) for row in rows
             for name in ([row["file"]] if "file" in row else row.get("files", []))}
    linked = set(re.findall(r"\]\(results/([^)]+)\)", results_page.render())) - {""}
    assert named and named <= linked
    assert not [name for name in linked if not (ROOT / "docs" / "results" / name).is_file()]


def test_every_row_names_a_known_cpu_kind_and_hand_carried_rows_their_source():
    index = results_format.load_index()
    for rows in (rows for rows in index.values() if isinstance(rows, list)):
        for row in rows:
            assert row["cpu"] in index["cpus"], row
            assert "file" in row or row.get("files") or row.get("from"), row


def test_a_compare_report_is_read_and_anything_else_refused():
    text = (ROOT / "docs" / "results" / "compare-resnet-18-b1-40-zen5.txt").read_text()
    assert result_readers.read_compare_text(text) == {"trials": 535, "farm_ms": 10.9, "ort_ms": 8.6}
    with pytest.raises(ValueError):
        result_readers.read_compare_text("resnet-18 batch 1\n")


def _evaluate_report(peers_ms: dict) -> dict:
    engines = {"TVM farm-tuned": {"median_ms": 10.0}, **{name: {"median_ms": ms} for name, ms in peers_ms.items()}}
    fastest = min(peers_ms, key=peers_ms.get)
    return {"date_utc": "2026-12-03T15:00:00+00:00", "cases": [{
        "model": "resnet-50", "batch": 1, "tuning": {"trials": 1234}, "engines": engines, "peak_gflops": 200.0,
        "ratios": {"fastest_peer": fastest, "tuned_over_best_reference": 10.0 / peers_ms[fastest]},
        "kernels": {"TVM farm-tuned": [{"kernel": "fused_conv2d_NCHWc_add_relu_prepacked", "share_of_peak": 0.625},
                                       {"kernel": "reshape", "share_of_peak": None}]}}]}


def test_the_peers_table_reads_each_engine_and_the_farms_heaviest_kernel(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({
        "cpus": {"zen4": "AMD EPYC family 25 model 17 (Zen 4)"},
        "peers": [{"cpu": "zen4", "file": "evaluate-peers.json", "budget": "quick start"}],
        "between_kernels": [{"cpu": "zen4", "file": "between.json"}]}))
    (tmp_path / "evaluate-peers.json").write_text(json.dumps(
        _evaluate_report({"onnxruntime": 8.0, "PyTorch eager": 20.0, "TVM pipeline": 12.5})))
    categories = {name: {"share_of_whole": share} for name, share in
                  (("tuned kernels", 0.8), ("tasks built untuned", 0.12), ("layout transforms", 0.05),
                   ("padding copies", 0.0), ("VM builtins", 0.01))}
    (tmp_path / "between.json").write_text(json.dumps({
        "model": "resnet-18", "batch": 1, "weights_layout": "prepacked-nchwc", "whole_model_median_ms": 20.0,
        "between_share_of_whole": 0.18, "categories": categories, "date_utc": "2026-12-03T15:10:00+00:00"}))
    page = results_format.Page(tmp_path)
    lines = results_page.peers(page)
    (row,) = [line for line in lines if line.startswith("| resnet-50 b1")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:10] == ["resnet-50 b1", "AMD EPYC family 25 model 17", "quick start", "1,234", "10.0", "8.00",
                          "20.0", "-", "12.5", "**1.25x** (onnxruntime)"]
    assert cells[10] == "fused_conv2d_NCHWc_add_relu_prepacked: 62% of 200 GFLOP/s"
    (between,) = [line for line in results_kernels.kernels_in_the_model(page) if line.startswith("| resnet-18 b1")]
    assert "18.0%" in between and "tasks built untuned 12.0%" in between and "padding copies" not in between



def test_each_models_kernels_in_the_model_against_alone_in_each_context_make_one_row(tmp_path):
    def kernel(share, ratio_warm, ratio_context):
        return {"share": share, "tuned": True, "ratio_warm": ratio_warm, "ratio_context": ratio_context}

    def side(context, kernels):
        return {"context": context, "kernels_ms": 10.0, "kernels": kernels}

    (tmp_path / "index.json").write_text(json.dumps({
        "cpus": {"zen4": "AMD EPYC family 25 model 17 (Zen 4)"},
        "in_model_contexts": [{"cpu": "zen4", "file": "a.json"}, {"cpu": "zen4", "file": "b.json"}]}))
    report = {"model": "resnet-50", "batch": 1, "date_utc": "2026-12-05T15:00:00+00:00"}
    (tmp_path / "a.json").write_text(json.dumps(report | {"sides": {
        "warm": side("warm", [kernel(0.3, 1.2, 1.2), kernel(0.1, 1.0, 1.0), {"share": 0.1, "tuned": False}]),
        "weights": side("weights", [kernel(0.3, 1.2, 1.1), kernel(0.1, 1.0, 0.9)])}}))
    (tmp_path / "b.json").write_text(json.dumps(report | {"sides": {
        "flushed": side("flushed", [kernel(0.3, 1.3, 1.0), kernel(0.1, 1.1, 1.0)])}}))
    (row,) = [line for line in results_kernels.in_model_contexts(results_format.Page(tmp_path))
              if line.startswith("| resnet-50 b1")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # warm, l2-evicted, weights, producer, flushed: the ratio to each context's own alone time, by share
    assert cells[2:7] == ["1.15x (1/2)", "", "1.05x (2/2)", "", "1.00x (2/2)"]
    assert "a.json" in cells[8] and "b.json" in cells[8]


def test_minutes_and_seconds_round_as_a_whole():
    assert results_format.mmss(359.5) == "6 min 0 s"
    assert results_format.mmss(397.6) == "6 min 38 s"
    assert results_format.mmss(59.4) == "0 min 59 s"


def test_an_ab_figure_pools_the_pairs_of_every_run_it_names():
    raws = [json.loads((ROOT / "docs" / "results" / name).read_text()) for name in (
        "timing-context-producer-resnet-18-xeon167-2026-12-05.json",
        "timing-context-producer-resnet-18-xeon167-2026-12-05-2.json")]
    median, date = result_readers.DEFAULT_READERS["context_over_warm"](*raws)
    pairs = raws[0]["context_over_warm_by_pair"] + raws[1]["context_over_warm_by_pair"]
    assert len(pairs) == 3 and median == sorted(pairs)[1] and date == raws[1]["date"]
    assert result_readers.DEFAULT_READERS["context_over_warm"](raws[0]) == (pairs[0], raws[0]["date"])
