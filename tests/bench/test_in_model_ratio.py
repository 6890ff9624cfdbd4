"""bench/in_model_ratio.py through a real process: its refusals, and a tuned tiny model's kernels timed in
the model and alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def ratio(*args, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "in_model_ratio.py"), *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "FARM_HOME": str(home)})


@pytest.mark.parametrize(("args", "says"), [
    (["no-such-net", "--side", "a=sqlite:///x.db"], "unknown model 'no-such-net'"),
    (["mlp-tiny"], "give a --side NAME=REGISTRY, or --tune"),
    (["mlp-tiny", "--side", "sqlite:///x.db"], "--side takes NAME=VALUE"),
    (["mlp-tiny", "--tune", "4", "--contexts", "cold"], "unknown timing context 'cold'"),
    (["mlp-tiny", "--side", "a=sqlite:///x.db", "--runs", "0"], "--runs and --repeat must be at least 1"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, says):
    done = ratio(*args, home=tmp_path)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_tuned_models_kernels_in_the_model_against_alone(tuned_mlp_home, tmp_path):
    registry = f"sqlite:///{tuned_mlp_home / 'registry.db'}"
    out = tmp_path / "ratio.json"
    done = ratio("mlp-tiny", "--side", f"default={registry}", "--side-context", "default=weights",
                 "--side", f"farm={registry}", "--runs", "3", "--repeat", "2", "--out", str(out), home=tuned_mlp_home)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    side = report["sides"]["default"]
    assert side["context"] == "weights" and side["kernels_ms"] > 0
    kernels = [k for k in side["kernels"] if k["tuned"]]
    assert kernels and all(k["share"] >= 0.05 for k in side["kernels"])
    for k in kernels:
        assert k["alone_context"] == "weights"
        assert k["ratio_warm"] == pytest.approx(k["in_model_ms"] / k["alone_warm_ms"])
        assert k["ratio_context"] == pytest.approx(k["in_model_ms"] / k["alone_context_ms"])
    assert "candidates timed weights" in done.stdout
    # A side named without --side-context was tuned as the farm tunes: warm.
    assert report["sides"]["farm"]["context"] == "warm"
    assert {k["alone_context"] for k in report["sides"]["farm"]["kernels"] if k["tuned"]} == {"warm"}
