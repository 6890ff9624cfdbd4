"""A box out of processes or open files (`ulimit -u`, `ulimit -n`): exit 6 (OutOfResources), one
line naming the limit, no traceback; never an internal error."""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess

import pytest

from support.other_user import drop_to_other_user, shared_directory


@pytest.fixture
def home():
    with shared_directory() as directory:
        yield directory


def submit_under(farm_exe: str, home, limits: dict[int, int]) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(home / "farm"), "HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    return subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--trials", "4"], env=env,
                          capture_output=True, text=True, timeout=600, preexec_fn=drop_to_other_user(limits))


def assert_one_line_naming(proc: subprocess.CompletedProcess, limit: str) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 6, proc.stderr
    assert len(errors) == 1 and limit in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return errors[0]


@pytest.mark.parametrize("processes", [3, 6, 12])
def test_a_process_limit_too_low_for_a_job_is_one_line_before_anything_is_written(farm_exe, home, processes):
    # 3: OpenMP's pool in the cost model ended the process ("libgomp: Thread creation failed", exit 1);
    # 6: a pool's thread raised in its own thread (exit 70); 12: every candidate failed (exit 1).
    proc = submit_under(farm_exe, home, {resource.RLIMIT_NPROC: processes})
    line = assert_one_line_naming(proc, "`ulimit -u`")
    # The check before the job, or (3, on a loaded box) a thread the command itself could not start first.
    assert f"is {processes}" in line, line
    registry = home / "farm" / "registry.db"
    if registry.exists():
        with sqlite3.connect(registry) as db:
            assert db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
        db.close()


@pytest.mark.parametrize("files", [16, 24, 25, 28, 30])
def test_an_open_file_limit_too_low_for_a_job_is_exit_6_naming_the_limit_not_a_file(farm_exe, home, files):
    # 25 to 30: every candidate could fail, "the target may not match this device" (exit 1).
    proc = submit_under(farm_exe, home, {resource.RLIMIT_NOFILE: files})
    line = assert_one_line_naming(proc, "`ulimit -n`")
    assert f"is {files}" in line and "cannot use" not in line


@pytest.mark.slow
def test_farm_run_under_any_open_file_limit_loads_or_names_the_limit_never_blames_the_artifact(farm_exe,
                                                                                               tuned_mlp_tiny,
                                                                                               tmp_path):
    # Out of files while the library was written to a temporary file, it read "artifact ... cannot be
    # loaded: Too many open files (re-tune it with ...)", exit 4.
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    env = {**os.environ, "FARM_HOME": str(home)}
    env.pop("FARM_REGISTRY", None)
    for files in range(5, 13):
        proc = subprocess.run([farm_exe, "run", "mlp-tiny", "llvm", "2", "--runs", "1", "--warmup", "0"], env=env,
                              capture_output=True, text=True, timeout=300,
                              preexec_fn=lambda files=files: resource.setrlimit(resource.RLIMIT_NOFILE, (files, files)))
        if proc.returncode != 0:
            line = assert_one_line_naming(proc, "`ulimit -n`")
            assert f"is {files}" in line and "re-tune" not in line, line
