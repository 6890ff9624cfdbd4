"""Shared test settings: every test run gets its own farm home, never the user's."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def farm_home(tmp_path_factory) -> Path:
    """Point FARM_HOME (data dir, default SQLite registry, caches) at a per-run directory."""
    home = tmp_path_factory.mktemp("farm-home")
    old = os.environ.get("FARM_HOME")
    os.environ["FARM_HOME"] = str(home)
    os.environ.pop("FARM_REGISTRY", None)
    yield home
    if old is None:
        os.environ.pop("FARM_HOME", None)
    else:
        os.environ["FARM_HOME"] = old


@pytest.fixture(scope="session")
def farm_exe() -> str:
    """The installed `farm` console script of the interpreter running the tests."""
    candidate = Path(sys.executable).with_name("farm")
    exe = str(candidate) if candidate.exists() else shutil.which("farm")
    if exe is None:
        pytest.fail("the `farm` executable is not installed: run scripts/setup")
    return exe
