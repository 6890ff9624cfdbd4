"""Registry paths through the real `farm` script (run in this process: support.farm_inprocess): readers create
nothing; a file that is not a registry stays untouched."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess

import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import one_error_line
from support.other_user import drop_to_other_user, shared_directory

READERS = [
    ["registry", "ls"],
    ["registry", "show", "art-1"],
    ["registry", "export", "{tmp}/exported"],
    ["registry", "upgrade"],
    ["jobs"],
    ["status", "job-1"],
    ["cancel", "job-1"],
    ["run", "mlp-tiny", "llvm", "1"],
]


@pytest.mark.parametrize("command", READERS, ids=[" ".join(c[:2]) for c in READERS])
def test_a_reader_on_a_mistyped_path_creates_nothing(tmp_path, command):
    registry = tmp_path / "typo" / "registry.db"
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = run_farm_inprocess(*args, "--registry", f"sqlite:///{registry}", home=tmp_path / "home")
    assert proc.returncode == 3, proc.stderr
    assert f"no registry at {registry}" in one_error_line(proc.stderr)
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", [*READERS, ["submit", "mlp-tiny", "llvm", "1"], ["registry", "init"]],
                         ids=lambda c: " ".join(c[:2]))
def test_another_applications_sqlite_file_is_refused_untouched(tmp_path, command):
    app_db = tmp_path / "app.db"
    with sqlite3.connect(app_db) as app:
        app.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    app.close()
    before = hashlib.sha256(app_db.read_bytes()).hexdigest()
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = run_farm_inprocess(*args, "--registry", f"sqlite:///{app_db}", home=tmp_path / "home")
    assert proc.returncode == 4, proc.stderr
    assert "is not a farm registry: it holds other tables (invoices)" in one_error_line(proc.stderr)
    assert hashlib.sha256(app_db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "home") == ["app.db"]


def test_registry_init_creates_a_registry_readers_then_use(tmp_path):
    url = f"sqlite:///{tmp_path / 'new' / 'registry.db'}"
    made = run_farm_inprocess("registry", "init", "--registry", url, "--json", home=tmp_path / "home")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["revision"]
    again = run_farm_inprocess("registry", "init", "--registry", url, home=tmp_path / "home")
    assert again.returncode == 0 and "is ready" in again.stdout
    listed = run_farm_inprocess("registry", "ls", "--registry", url, "--json", home=tmp_path / "home")
    assert listed.returncode == 0 and json.loads(listed.stdout)["counts"]["jobs"] == 0
    jobs = run_farm_inprocess("jobs", "--registry", url, "--json", home=tmp_path / "home")
    assert jobs.returncode == 0 and json.loads(jobs.stdout) == []


@pytest.mark.parametrize("command", [["registry", "upgrade"], ["jobs"], ["registry", "ls"],
                                     ["submit", "mlp-tiny", "llvm", "1"]], ids=lambda c: " ".join(c[:2]))
def test_a_registry_recording_two_schema_versions_names_them_and_how_to_fix_it(tmp_path, command):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    assert run_farm_inprocess("registry", "init", "--registry", url, home=tmp_path / "home").returncode == 0
    with sqlite3.connect(tmp_path / "registry.db") as db:  # a manual migration gone wrong
        (head,) = db.execute("SELECT version_num FROM alembic_version").fetchone()
        db.execute("INSERT INTO alembic_version VALUES ('0005_prepack')")
    db.close()
    proc = run_farm_inprocess(*command, "--registry", url, home=tmp_path / "home")
    line = one_error_line(proc.stderr)
    assert proc.returncode == 4, proc.stderr
    assert f"records two schema versions: '0005_prepack' and '{head}'" in line, line
    assert "DELETE FROM alembic_version WHERE version_num" in line and "internal error" not in line


@pytest.mark.parametrize("mode, said", [(0o444, "is read-only for this user"), (0o000, "cannot be read by this user")])
def test_a_registry_this_user_cannot_write_or_read_says_so_not_that_it_is_no_database(farm_exe, mode, said):
    with shared_directory() as shared:
        made = shared / "made" / "registry.db"
        assert run_farm_inprocess("registry", "init", "--registry", f"sqlite:///{made}",
                                  home=shared / "home").returncode == 0
        with sqlite3.connect(made) as db:  # the WAL folded into the file, copied alone: no -shm to read through
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        registry = shared / "registry" / "registry.db"
        registry.parent.mkdir(mode=0o755)  # root's directory: this user can write nothing there
        shutil.copyfile(made, registry)
        registry.chmod(mode)
        url = f"sqlite:///{registry}"
        env = {**os.environ, "FARM_HOME": str(shared / "home"), "HOME": str(shared)}
        proc = subprocess.run([farm_exe, "jobs", "--registry", url], env=env, capture_output=True, text=True,
                              timeout=120, preexec_fn=drop_to_other_user())
    line = one_error_line(proc.stderr)
    assert proc.returncode == 4 and said in line and "not a SQLite database" not in line, line
    assert "permissions" in line


LONG = "x" * 5000


@pytest.mark.parametrize("command", [
    ["status", f"job-{LONG}"], ["cancel", f"job-{LONG}"], ["registry", "show", f"art-{LONG}"],
    ["registry", "show", LONG], ["registry", "export", "{tmp}/out", "--fingerprint", LONG],
    ["submit", LONG, "llvm", "1"], ["submit", "mlp-tiny", LONG, "1"],
], ids=lambda c: " ".join(a[:12] for a in c[:3]))
def test_a_5000_character_id_is_quoted_cut_to_its_start_and_length(tmp_path, command):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    assert run_farm_inprocess("registry", "init", "--registry", url, home=tmp_path / "home").returncode == 0
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = run_farm_inprocess(*args, "--registry", url, home=tmp_path / "home")
    line = one_error_line(proc.stderr)
    assert proc.returncode in (2, 3) and len(line) < 600 and "characters)" in line, line[:300]
