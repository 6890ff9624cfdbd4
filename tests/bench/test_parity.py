"""bench/parity.py through real processes: a refused case, and a curve taken in two pieces."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "parity.py"


def parity(*args, home: Path) -> subprocess.CompletedProcess:
    env = {"FARM_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, env=env)


def test_a_malformed_case_is_refused_with_exit_2(tmp_path):
    done = parity("resnet-18", "--out", str(tmp_path / "p.json"), home=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: bad case 'resnet-18'"), done.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.slow
def test_each_step_adds_trials_and_a_rerun_resumes_the_curve(tmp_path):
    out = tmp_path / "parity.json"
    common = ["--step", "2", "--runs", "4", "--rounds", "2", "--out", str(out), "--past-parity"]
    first = parity("mlp-tiny:1", *common, "--max-steps", "1", home=tmp_path)
    assert first.returncode == 0, first.stderr
    (one,) = json.loads(out.read_text())["points"]
    assert one["trials"] > 0 and one["jobs"] == 1 and one["farm_ms"] > 0 and one["onnxruntime_ms"] > 0
    assert one["farm_over_onnxruntime"] == pytest.approx(one["farm_ms"] / one["onnxruntime_ms"])

    # The rerun reads the report, retunes (a second job on the same registry) and appends its point.
    second = parity("mlp-tiny:1", *common, "--until-trials", str(one["trials"] + 1), home=tmp_path)
    assert second.returncode == 0, second.stderr
    report = json.loads(out.read_text())
    assert report == json.loads(second.stdout)
    assert [p["jobs"] for p in report["points"]] == [1, 2]
    assert report["points"][0] == one and report["points"][1]["trials"] > one["trials"]
    assert report["wall_s"] == pytest.approx(sum(p["step_wall_s"] for p in report["points"]))
