"""A library tuned on this CPU at another size answers `farm run`, `farm.load` and a submit here.

The run's tuned home was tuned on the whole box; the tests run `farm` under `taskset -c 0`, a
box of one core: another fingerprint id, the same hardware (foundation.job_driver.hits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
                       reason="needs taskset and two CPUs: one core of this box is a compatible fingerprint"),
]


def one_core(exe: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    first = sorted(os.sched_getaffinity(0))[0]
    return subprocess.run(["taskset", "-c", str(first), exe, *args], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture
def home(tuned_mlp_tiny, tmp_path) -> Path:
    return tuned_mlp_tiny.copy_to(tmp_path / "tuned-home")


def test_run_on_one_core_loads_the_whole_box_library_and_says_so(farm_exe, home, tuned_mlp_tiny):
    tuned = tuned_mlp_tiny.submitted
    proc = one_core(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--runs", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout)
    assert ran["fingerprint"] != tuned["fingerprint"]  # one core is another fingerprint
    assert ran["tuned_on"] == tuned["fingerprint"] and ran["artifact"] == tuned["artifact"]["id"]
    assert ran["latency_ms"]["median"] > 0  # timed here
    text = one_core(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--runs", "3")
    assert text.returncode == 0, text.stderr
    assert f"tuned on   {tuned['fingerprint']}, this CPU at another size" in text.stdout


def test_submit_on_one_core_is_answered_by_it_and_names_whose_it_is(farm_exe, home, tuned_mlp_tiny):
    tuned = tuned_mlp_tiny.submitted
    proc = one_core(farm_exe, home, "submit", "mlp-tiny", "llvm", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    hit = json.loads(proc.stdout)
    assert hit["cache_hit"] is True and hit["trials"] == 0
    assert hit["artifact"]["id"] == tuned["artifact"]["id"]
    text = one_core(farm_exe, home, "submit", "mlp-tiny", "llvm", "2")
    assert text.returncode == 0, text.stderr
    assert f"answered by the library tuned on {tuned['fingerprint']}, this CPU at another size" in text.stderr
    assert f"tuned on     {tuned['fingerprint']}, this CPU at another size" in text.stdout


def test_fingerprint_names_a_compatible_one_and_refuses_an_unknown_one(farm_exe, home, tuned_mlp_tiny):
    tuned = tuned_mlp_tiny.submitted
    named = one_core(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--runs", "2", "--json",
                     "--fingerprint", tuned["fingerprint"])
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["tuned_on"] == tuned["fingerprint"]
    unknown = one_core(farm_exe, home, "run", "mlp-tiny", "llvm", "2", "--fingerprint", "cpu-000000000000")
    assert unknown.returncode == 3
    assert unknown.stderr.strip().splitlines() == [
        "error: no fingerprint 'cpu-000000000000' in the registry (`farm registry ls` lists the fingerprints it holds)"]
