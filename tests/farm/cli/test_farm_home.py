"""FARM_HOME as a careless user sets it: a file, under a file, on a full disk. The message names it."""

from __future__ import annotations

import os
import subprocess

import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import FarmProcess, one_error_line, run_farm
from support.other_user import drop_to_other_user, shared_directory
from support.small_disk import fill, fill_once_tuning, small_disk


@pytest.mark.parametrize("command", [["submit", "mlp-tiny", "llvm", "1", "--trials", "4"], ["jobs"],
                                     ["registry", "init"]], ids=lambda c: c[0])
def test_a_farm_home_that_is_a_file_is_named(tmp_path, command):
    home = tmp_path / "home"
    home.write_text("not a directory")
    proc = run_farm_inprocess(*command, home=home)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr) == (f"error: FARM_HOME={home} is not a directory "
                                           "(set FARM_HOME to a directory this user can write)")


def test_a_farm_home_under_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    home = tmp_path / "file" / "home"
    proc = run_farm_inprocess("registry", "init", home=home)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr).startswith(f"error: FARM_HOME={home} cannot be created: Not a directory")


@pytest.mark.slow
def test_a_farm_home_on_a_full_disk_says_once_that_the_jobs_logs_are_lost(farm_exe, tmp_path):
    with small_disk(tmp_path / "disk", 512) as disk:
        (disk / "home" / "jobs").mkdir(parents=True)
        fill(disk)
        proc = run_farm(farm_exe, disk / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "4", "--registry",
                        f"sqlite:///{tmp_path / 'registry.db'}")
    said = [line for line in proc.stderr.splitlines() if "are not kept" in line]
    assert proc.returncode == 0, proc.stderr
    assert len(said) == 1 and said[0].startswith(f"warning: the job's logs in {disk / 'home' / 'jobs'}"), proc.stderr
    assert "No space left on device" in said[0] and "FARM_HOME" in said[0]


@pytest.mark.parametrize("registry", ["FARM_HOME's", "its own"])
def test_a_farm_home_this_user_cannot_write_is_named_before_a_job_is_written(farm_exe, registry):
    with shared_directory() as shared:
        home = shared / "home"
        home.mkdir(mode=0o755)  # root's: this user may read it, not write it
        own = shared / "own" / "registry.db"
        args = ["--registry", f"sqlite:///{own}"] if registry == "its own" else []
        env = {**os.environ, "FARM_HOME": str(home), "HOME": str(shared)}
        env.pop("FARM_REGISTRY", None)
        proc = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--trials", "4", *args], env=env,
                              capture_output=True, text=True, timeout=300, preexec_fn=drop_to_other_user())
        assert proc.returncode == 2, proc.stderr
        assert one_error_line(proc.stderr) == (f"error: FARM_HOME={home} is not writable by this user "
                                               "(set FARM_HOME to a directory this user can write)")
        assert not own.exists() and list(home.iterdir()) == []


@pytest.mark.slow
def test_a_farm_home_whose_disk_fills_while_tuning_says_once_that_the_jobs_logs_are_lost(farm_exe, tmp_path):
    with small_disk(tmp_path / "disk", 2048) as disk:
        job = FarmProcess.start(farm_exe, disk / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "16",
                                "--runs", "2", "--registry", f"sqlite:///{tmp_path / 'registry.db'}")
        code, rest = fill_once_tuning(job, disk)  # tuning: MetaSchedule's task logs are being written
    lost = [line for line in rest.splitlines() if "are not kept" in line]
    assert code == 0, rest
    assert len(lost) == 1 and lost[0].startswith(f"warning: the job's logs in {disk / 'home' / 'jobs'}"), rest
    assert "No space left on device" in lost[0] and "FARM_HOME" in lost[0] and "Logging error" not in rest
