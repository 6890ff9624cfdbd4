"""FARM_REGISTRY_FILE through the real `farm` executable: `farm registry upgrade --create` (what
every recipe runs first) opens the registry the file names; a missing or empty file stops it with
one line and exit 2."""

from __future__ import annotations

import json
import subprocess

import pytest

from support.farm_inprocess import farm_script
from support.farm_process import farm_env


def run_farm(home, *args, **env):
    return subprocess.run([str(farm_script()), *args], env={**farm_env(home), **env}, capture_output=True,
                          text=True, timeout=300)


def test_upgrade_opens_the_registry_the_file_names(tmp_path):
    database = tmp_path / "from-file.db"
    path = tmp_path / "registry-url"
    path.write_text(f"sqlite:///{database}\n")
    done = run_farm(tmp_path / "home", "registry", "upgrade", "--create", "--json", FARM_REGISTRY_FILE=str(path))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["registry"] == f"sqlite:///{database}"
    assert database.is_file() and not (tmp_path / "home" / "registry.db").exists()


def test_the_url_printed_hides_its_password(tmp_path):
    """`registry upgrade --json` names the registry without the password the file keeps."""
    path = tmp_path / "registry-url"
    path.write_text("postgresql://farm:s3cret@127.0.0.1:1/farm")  # nothing listens on port 1
    done = run_farm(tmp_path / "home", "registry", "upgrade", "--create", "--json", FARM_REGISTRY_FILE=str(path))
    assert done.returncode != 0 and "s3cret" not in done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["missing", "empty", "directory"])
def test_a_file_that_cannot_serve_is_one_line_and_exit_2(tmp_path, kind):
    path = tmp_path / "registry-url"
    if kind == "empty":
        path.write_text("\n")
    elif kind == "directory":
        path.mkdir()
    done = run_farm(tmp_path / "home", "registry", "upgrade", "--create", FARM_REGISTRY_FILE=str(path))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and f"FARM_REGISTRY_FILE={path}" in line and line.endswith(")"), line
    assert not (tmp_path / "home" / "registry.db").exists(), "no registry of its own in the file's place"


def test_farm_registry_and_the_file_together_are_refused(tmp_path):
    path = tmp_path / "registry-url"
    path.write_text(f"sqlite:///{tmp_path / 'a.db'}")
    done = run_farm(tmp_path / "home", "registry", "upgrade", "--create", FARM_REGISTRY_FILE=str(path),
                    FARM_REGISTRY=f"sqlite:///{tmp_path / 'b.db'}")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "both FARM_REGISTRY and FARM_REGISTRY_FILE" in line
