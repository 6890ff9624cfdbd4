"""The packs tvm-farm ships: a new registry loads them; a submit on the box whose fingerprint a
pack holds reuses its records; `--cold` and FARM_SHIPPED_PACKS=0 leave them out.

The shipped directory is this test's own: a pack written from the run's tuned home without its
library (as the shipped ones are), so the submit must build from the pack's records.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from foundation.config import SHIPPED_PACKS_DIR_ENV, SHIPPED_PACKS_ENV

from support.farm_inprocess import run_farm_inprocess

pytestmark = pytest.mark.slow

MLP = ["mlp-tiny", "llvm", "2", "--trials", "12", "--trials-per-task", "8", "--runs", "3", "--json"]


def farm_here(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm_inprocess(*args, home=home)


def farm(exe: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def shipped(tuned_mlp_tiny, tmp_path, monkeypatch) -> Path:
    tuned = tuned_mlp_tiny.copy_to(tmp_path / "tuned-home")
    directory = tmp_path / "shipped"
    directory.mkdir()
    made = farm_here(tuned, "registry", "sync", str(tuned / "registry.db"), str(directory / "mlp-tiny.farmpack"),
                     "--no-artifacts")
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv(SHIPPED_PACKS_DIR_ENV, str(directory))
    monkeypatch.setenv(SHIPPED_PACKS_ENV, "1")
    return directory


def test_a_shipped_pack_is_in_a_new_registry_and_its_records_are_reused(shipped, tmp_path, tuned_mlp_tiny, farm_exe):
    with gzip.open(shipped / "mlp-tiny.farmpack", "rt") as lines:
        assert json.loads(lines.readline())["tables"]["artifacts"]["rows"] == 0
    home = tmp_path / "new-home"
    proc = farm(farm_exe, home, "submit", *MLP)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["cache_hit"] is False and job["state"] == "succeeded"
    assert job["fingerprint"] == tuned_mlp_tiny.submitted["fingerprint"]
    assert job["reuse"]["skipped"] > 0 and job["trials"] < tuned_mlp_tiny.submitted["trials"]

    init = farm_here(tmp_path / "init-home", "registry", "init", "--json")
    assert init.returncode == 0, init.stderr
    assert json.loads(init.stdout)["packs"]["mlp-tiny.farmpack"]["records"] > 0


def test_cold_and_the_switch_leave_them_out(shipped, tmp_path, monkeypatch, farm_exe):
    cold = farm(farm_exe, tmp_path / "cold-home", "submit", *MLP, "--cold")
    assert cold.returncode == 0, cold.stderr
    assert json.loads(cold.stdout)["reuse"]["skipped"] == 0
    monkeypatch.setenv(SHIPPED_PACKS_ENV, "0")
    init = farm_here(tmp_path / "off-home", "registry", "init", "--json")
    assert json.loads(init.stdout)["packs"] == {}
