"""The optional parts of the farm, as extras: `farm report` (and `submit --report`) without
matplotlib (the `report` extra), and a PostgreSQL registry without psycopg (the `postgres`
extra), each stop with one line naming the extra, exit 2, before anything is written; SQLite
needs neither. Run through the real CLI entry point in a process where the package is made
unimportable (sys.modules[name] = None, as if it were not installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.farm_process import farm_env

WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # `import name` raises ImportError, as where it is not installed
sys.argv = ["farm", *sys.argv[2:]]
from farm.cli.launch import main
main()
"""


def run_without(home, modules: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT, modules, *args], env={**farm_env(home), **env},
                          capture_output=True, text=True, timeout=300)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(")"), line
    return line


def test_report_without_matplotlib_names_the_report_extra(tmp_path):
    done = run_without(tmp_path / "home", "matplotlib,matplotlib.pyplot", "report", "job-0123456789ab",
                       "--out", str(tmp_path / "out"))
    line = one_error_line(done)
    assert "matplotlib" in line and "pip install 'tvm-farm[report]'" in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "home" / "registry.db").exists()


def test_submit_report_without_matplotlib_stops_before_the_job(tmp_path):
    done = run_without(tmp_path / "home", "matplotlib", "submit", "resnet-18", "llvm", "1",
                       "--report", str(tmp_path / "out"))
    assert "pip install 'tvm-farm[report]'" in one_error_line(done)
    assert not (tmp_path / "out").exists() and not (tmp_path / "home" / "registry.db").exists(), "nothing ran"


@pytest.mark.parametrize("url", ["postgresql://farm:s3cret@127.0.0.1:1/farm", "postgres://farm@127.0.0.1:1/farm"])
def test_a_postgresql_registry_without_psycopg_names_the_postgres_extra(tmp_path, url):
    done = run_without(tmp_path / "home", "psycopg", "registry", "upgrade", "--create", "--registry", url)
    line = one_error_line(done)
    assert "psycopg" in line and "pip install 'tvm-farm[postgres]'" in line and "s3cret" not in line, line


def test_sqlite_needs_neither_extra(tmp_path):
    database = tmp_path / "registry.db"
    done = run_without(tmp_path / "home", "psycopg,matplotlib", "registry", "upgrade", "--create",
                       "--registry", f"sqlite:///{database}")
    assert done.returncode == 0, done.stderr
    assert database.is_file()
