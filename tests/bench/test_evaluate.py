"""bench/evaluate.py through a real process: refusals, and a tiny evaluation that tunes, checks, times, adds trials."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "evaluate.py"


def evaluate(*args, home: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {"FARM_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.mark.parametrize("case", ["resnet-18:one", "resnet-18:0", ":1", "resnet-18:1:16:extra"])
def test_a_malformed_case_is_refused_with_exit_2(tmp_path, case):
    done = evaluate(case, home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: bad case {case!r} "
                                                "(write MODEL:BATCH[:TRIALS_PER_TASK], e.g. resnet-18:1:16)"]


def test_an_unknown_weights_layout_is_refused_with_exit_2(tmp_path):
    done = evaluate("mlp-tiny:1", "--weights-layout", "packed", home=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'packed'" in done.stderr
    assert not (tmp_path / "registry.db").exists()


def test_an_unknown_model_is_refused_before_any_tuning(tmp_path):
    done = evaluate("no-such-net:1", home=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: unknown model 'no-such-net'")
    assert not (tmp_path / "registry.db").exists()


def test_no_tune_without_a_library_is_not_found(tmp_path):
    done = evaluate("mlp-tiny:1", "--no-tune", "--out", str(tmp_path / "out"), home=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: no tuned library for mlp-tiny")
    assert not list((tmp_path / "out").glob("evaluate-*"))  # nothing half-written


@pytest.mark.slow
def test_tunes_checks_times_and_a_retune_adds_trials(tmp_path):
    out = tmp_path / "out"
    common = ["--out", str(out), "--runs", "4", "--untuned-runs", "2", "--warmup", "1", "--rounds", "2",
              "--weights-layout", "plain"]  # not the farm's default (prepacked-nchwc): the flag reaches submit and load
    first = evaluate("mlp-tiny:1:4", *common, "--tag", "first", home=tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads((out / "evaluate-first.json").read_text())
    (case,) = report["cases"]
    assert case["model"] == "mlp-tiny" and case["batch"] == 1 and case["artifact"]["weights_layout"] == "plain"
    assert set(case["engines"]) >= {"TVM untuned", "TVM farm-tuned", "onnxruntime"}
    assert case["engines"]["TVM untuned"]["runs"] == 2 and case["engines"]["onnxruntime"]["runs"] == 4
    assert all(c["passed"] for checks in case["agreement"].values() for c in checks)
    first_trials = case["tuning"]["trials"]
    assert first_trials > 0 and len(case["tuning"]["jobs"]) == 1 and case["tuning"]["curve_trials_ms"]
    assert report["machine"]["cpu"] and len(report["machine"]["loadavg_start"]) == 3
    for name in ("evaluate-first.csv", "evaluate-first-latency.png", "evaluate-first-trials.png"):
        assert (out / name).stat().st_size > 0
    assert "farm-tuned / onnxruntime" in first.stdout

    again = evaluate("mlp-tiny:1:4", *common, "--tag", "again", "--retune", "--no-plots", home=tmp_path)
    assert again.returncode == 0, again.stderr
    (case,) = json.loads((out / "evaluate-again.json").read_text())["cases"]
    assert len(case["tuning"]["jobs"]) == 2
    assert case["tuning"]["trials"] > first_trials
    assert not (out / "evaluate-again-latency.png").exists()


def test_a_negative_kernel_runs_is_refused_with_exit_2(tmp_path):
    done = evaluate("mlp-tiny:1", "--kernel-runs", "-1", home=tmp_path)
    assert done.returncode == 2 and "--kernel-runs" in done.stderr
    assert not (tmp_path / "registry.db").exists()


@pytest.mark.slow
def test_tvm_pipeline_at_the_farms_trials_and_each_kernels_share_of_the_peak(tmp_path):
    import result_readers

    out, work = tmp_path / "out", tmp_path / "pipeline"
    common = ["--out", str(out), "--runs", "4", "--untuned-runs", "0", "--warmup", "1", "--rounds", "2",
              "--tvm-pipeline", "--tvm-pipeline-work", str(work), "--no-torch-compile", "--kernel-runs", "3"]
    first = evaluate("mlp-tiny:1:2", *common, "--tag", "peers", home=tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads((out / "evaluate-peers.json").read_text())
    (case,) = report["cases"]
    assert {"TVM farm-tuned", "onnxruntime", "TVM pipeline"} <= set(case["engines"])
    checked = {c["engine"] for checks in case["agreement"].values() for c in checks if c["passed"]}
    assert "TVM pipeline" in checked and all(c["passed"] for checks in case["agreement"].values() for c in checks)
    summary = case["tvm_pipeline"]["summary"]
    # TVM's pipeline was given the farm's budget: its total and per-task cap.
    assert summary["trials"] == case["tuning"]["trials"] > 0 and summary["trials_per_task"] == 2
    assert summary["records"] > 0
    assert case["ratios"]["fastest_peer"] in case["engines"]
    assert case["peak_gflops"] > 0 and case["probe_gflops"] > 0
    # The peak is the probe's, or a kernel's that beat it (alone: the fingerprint's records are listed).
    assert case["peak_gflops"] >= case["probe_gflops"] and case["fastest_alone"][0]["gflops"] > 0
    assert case["peak_from"] == "the probe" or "faster than the probe" in case["peak_from"]
    for engine in ("TVM farm-tuned", "TVM pipeline"):
        rows = case["kernels"][engine]
        matmuls = [r for r in rows if "matmul" in r["kernel"]]
        assert len(matmuls) == 2, rows
        assert all(r["calls"] == 1 and r["gflops"] > 0 and 0 < r["share_of_peak"] <= 1.0 for r in matmuls)
    for name in ("evaluate-peers-kernels.csv", "evaluate-peers-peak.png", "evaluate-peers-latency.png"):
        assert (out / name).stat().st_size > 0
    assert "of peak" in first.stdout
    (row,) = result_readers.read_peers(report)
    assert row["case"] == "mlp-tiny b1" and row["peers_ms"]["TVM pipeline"] > 0
    assert row["peers_ms"]["torch.compile"] is None and row["heaviest"]["share_of_peak"] > 0

    # The same budget again: the pipeline's build is reused, not tuned anew.
    library = work / "mlp-tiny-b1-{}-2".format(summary["trials"]) / "model.so"
    built_at = library.stat().st_mtime_ns
    again = evaluate("mlp-tiny:1:2", *common, "--no-tune", "--no-plots", "--tag", "again", home=tmp_path)
    assert again.returncode == 0, again.stderr
    assert library.stat().st_mtime_ns == built_at
    (case,) = json.loads((out / "evaluate-again.json").read_text())["cases"]
    assert case["tvm_pipeline"]["summary"] == summary


@pytest.mark.slow
def test_torch_compile_runs_the_same_graph(tuned_mlp_home, tmp_path):
    pytest.importorskip("torch")  # the optional torch extra: VENV=.venv-bench EXTRAS=test,torch scripts/setup
    out = tmp_path / "out"
    done = evaluate("mlp-tiny:1", "--no-tune", "--out", str(out), "--runs", "4", "--untuned-runs", "0",
                    "--warmup", "1", "--rounds", "2", "--kernel-runs", "0", "--no-plots", "--tag", "torch",
                    home=tuned_mlp_home)
    assert done.returncode == 0, done.stderr
    (case,) = json.loads((out / "evaluate-torch.json").read_text())["cases"]
    assert {"PyTorch eager", "torch.compile"} <= set(case["engines"])
    assert "torch.compile" in {c["engine"] for checks in case["agreement"].values() for c in checks if c["passed"]}
    assert case["kernels"] == {}
