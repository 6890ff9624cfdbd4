"""A disk that fills up under a command: exit 6 (OutOfResources), one line, nothing half-written."""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import text

from support.farm_process import FarmProcess, farm_env, run_farm
from support.registry_db import database_name, fresh_postgres_database
from support.small_disk import fill, fill_once_tuning, small_disk


@pytest.fixture
def registry_disk(tmp_path):
    with small_disk(tmp_path / "disk", 2048) as disk:
        yield disk


def assert_out_of_disk(proc_code: int, stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert proc_code == 6, stderr
    assert len(lines) == 1 and "disk is full" in lines[0], stderr
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr


def test_a_registry_on_a_full_disk_is_exit_6_and_names_the_disk(farm_exe, tmp_path, registry_disk):
    url = f"sqlite:///{registry_disk / 'registry.db'}"
    assert run_farm(farm_exe, tmp_path / "home", "registry", "init", "--registry", url).returncode == 0
    fill(registry_disk)
    proc = run_farm(farm_exe, tmp_path / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "4", "--registry", url)
    assert_out_of_disk(proc.returncode, proc.stderr)


@pytest.mark.slow
def test_a_registry_disk_that_fills_while_tuning_fails_the_job_with_exit_6(farm_exe, tmp_path, registry_disk):
    url = f"sqlite:///{registry_disk / 'registry.db'}"
    job = FarmProcess.start(farm_exe, tmp_path / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "48",
                            "--registry", url)
    code, said = fill_once_tuning(job, registry_disk)  # the disk fills under the tune
    assert_out_of_disk(code, said)
    with sqlite3.connect(f"file:{registry_disk / 'registry.db'}?mode=ro", uri=True) as db:
        state, error = db.execute("SELECT state, error FROM jobs").fetchone()
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # A disk with no byte left takes not even the job's failure; the first command after space
    # is freed marks it failed, as it does any job whose process is gone.
    assert (state, "disk is full" in (error or "")) in (("failed", True), ("running", False))
    (registry_disk / "filler").unlink()
    listed = run_farm(farm_exe, tmp_path / "home", "jobs", "--json", "--registry", url)
    assert listed.returncode == 0, listed.stderr
    assert [job["state"] for job in json.loads(listed.stdout)] == ["failed"]


@pytest.mark.postgres
def test_a_postgresql_registry_on_a_full_disk_is_exit_6(farm_exe, tmp_path, postgres_admin):
    # The registry's tables in a tablespace on a small disk; the server must reach it, so not
    # under tmp_path, which only root may enter.
    disk = Path(tempfile.mkdtemp(prefix="farm-pg-disk-", dir="/tmp"))
    name = f"farm_full_{secrets.token_hex(4)}"
    with small_disk(disk, 1024, owner="postgres"):
        with postgres_admin.connect() as admin:
            admin.execute(text(f"CREATE TABLESPACE {name} LOCATION '{disk}'"))
        url, drop = fresh_postgres_database(postgres_admin)
        try:
            with postgres_admin.connect() as admin:
                admin.execute(text(f'ALTER DATABASE "{database_name(url)}" SET default_tablespace = {name}'))
            assert run_farm(farm_exe, tmp_path / "home", "registry", "init", "--registry", url).returncode == 0
            fill(disk)
            proc = run_farm(farm_exe, tmp_path / "home", "submit", "mlp-tiny", "llvm", "1", "--trials", "4",
                            "--registry", url)
        finally:
            drop()
            with postgres_admin.connect() as admin:
                admin.execute(text(f"DROP TABLESPACE IF EXISTS {name}"))
    disk.rmdir()
    assert_out_of_disk(proc.returncode, proc.stderr)


def submit_with_tmpdir(farm_exe: str, home: Path, tmpdir: Path, *args: str) -> subprocess.Popen:
    env = {**farm_env(home), "TMPDIR": str(tmpdir)}
    return subprocess.Popen([farm_exe, "submit", "mlp-tiny", "llvm", "1", "--trials", "16", "--runs", "2", *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_temporary_directory_without_room_for_a_build_is_exit_6_naming_it_before_a_job_is_written(farm_exe,
                                                                                                   tmp_path):
    # Writable (a full one Python's tempfile passes over for /tmp), with less room than a build may need.
    with small_disk(tmp_path / "tmp", 8 * 1024) as tmpdir:
        proc = submit_with_tmpdir(farm_exe, tmp_path / "home", tmpdir)
        _out, err = proc.communicate(timeout=600)
    assert_out_of_disk(proc.returncode, err)
    assert f"disk is full for {tmpdir}, the temporary directory" in err and "TMPDIR" in err, err
    with sqlite3.connect(f"file:{tmp_path / 'home' / 'registry.db'}?mode=ro", uri=True) as db:
        assert db.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    db.close()



def test_a_full_disk_of_sqlites_temporary_files_is_named_not_the_registrys(farm_exe, tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    # With the shipped packs: a registry of tens of MB, more than SQLite keeps in memory while it copies it.
    made = subprocess.run([farm_exe, "registry", "init", "--registry", url], capture_output=True, text=True,
                          env={**farm_env(tmp_path / "home"), "FARM_SHIPPED_PACKS": "1"}, timeout=300)
    assert made.returncode == 0, made.stderr
    with small_disk(tmp_path / "tmp", 512) as tmpdir:
        fill(tmpdir)  # VACUUM copies the registry there
        env = {**farm_env(tmp_path / "home"), "TMPDIR": str(tmpdir)}
        proc = subprocess.run([farm_exe, "registry", "prune", "--vacuum", "--registry", url], env=env,
                              capture_output=True, text=True, timeout=300)
    assert_out_of_disk(proc.returncode, proc.stderr)
    assert f"the disk is full for SQLite's temporary files, TMPDIR={tmpdir} (" in proc.stderr, proc.stderr
    assert "the registry's own disk has room" in proc.stderr, proc.stderr
