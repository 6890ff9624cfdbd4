"""Registry paths through the real `farm`: readers create nothing; a file that is not a registry stays untouched."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from support.farm_process import one_error_line, run_farm

pytestmark = pytest.mark.slow  # a process start per case: minutes, though nothing is tuned

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
def test_a_reader_on_a_mistyped_path_creates_nothing(farm_exe, tmp_path, command):
    registry = tmp_path / "typo" / "registry.db"
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = run_farm(farm_exe, tmp_path / "home", *args, "--registry", f"sqlite:///{registry}")
    assert proc.returncode == 3, proc.stderr
    assert f"no registry at {registry}" in one_error_line(proc.stderr)
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", [*READERS, ["submit", "mlp-tiny", "llvm", "1"], ["registry", "init"]],
                         ids=lambda c: " ".join(c[:2]))
def test_another_applications_sqlite_file_is_refused_untouched(farm_exe, tmp_path, command):
    app_db = tmp_path / "app.db"
    with sqlite3.connect(app_db) as app:
        app.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    app.close()
    before = hashlib.sha256(app_db.read_bytes()).hexdigest()
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    proc = run_farm(farm_exe, tmp_path / "home", *args, "--registry", f"sqlite:///{app_db}")
    assert proc.returncode == 4, proc.stderr
    assert "is not a farm registry: it holds other tables (invoices)" in one_error_line(proc.stderr)
    assert hashlib.sha256(app_db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "home") == ["app.db"]


def test_registry_init_creates_a_registry_readers_then_use(farm_exe, tmp_path):
    url = f"sqlite:///{tmp_path / 'new' / 'registry.db'}"
    made = run_farm(farm_exe, tmp_path / "home", "registry", "init", "--registry", url, "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["revision"]
    again = run_farm(farm_exe, tmp_path / "home", "registry", "init", "--registry", url)
    assert again.returncode == 0 and "is ready" in again.stdout
    listed = run_farm(farm_exe, tmp_path / "home", "registry", "ls", "--registry", url, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["counts"]["jobs"] == 0
    jobs = run_farm(farm_exe, tmp_path / "home", "jobs", "--registry", url, "--json")
    assert jobs.returncode == 0 and json.loads(jobs.stdout) == []
