"""The run's own farm home (FARM_HOME): set for the whole run, and still set after every test.

Every process a test starts inherits FARM_HOME, and every in-process call reads it: a test that
changes it and leaves it changed (or unset) sends the tests after it, in the same worker, to
another home, the user's own (~/.local/share/tvm-farm) when it is unset. So each test is checked
as it ends, and fails if it left FARM_HOME otherwise than it found it; monkeypatch.setenv puts it
back before the check.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from foundation.config import HOME_ENV, KEEP_SLOWER_ENV, REGISTRY_ENV, REGISTRY_FILE_ENV, SHIPPED_PACKS_ENV


@pytest.fixture(scope="session", autouse=True)
def farm_home(tmp_path_factory) -> Iterator[Path]:
    """Point FARM_HOME (data dir, default SQLite registry, caches) at a per-run directory."""
    home = tmp_path_factory.mktemp("farm-home")
    old = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(home)
    os.environ.pop(REGISTRY_ENV, None)
    os.environ.pop(REGISTRY_FILE_ENV, None)
    # The suite's budgets are a few trials: whether such a library beats the untuned build is the
    # search's luck, so jobs store what they tuned (still flagged slower_than_untuned). The tests of
    # keeping the untuned build (tests/farm/test_slower_than_untuned.py) unset it.
    os.environ[KEEP_SLOWER_ENV] = "1"
    # A test's registry starts empty: the records of the packs tvm-farm ships (resnet-18, bert, ...)
    # would be seeds of its models. The tests of shipped packs set it back.
    os.environ[SHIPPED_PACKS_ENV] = "0"
    yield home
    if old is None:
        os.environ.pop(HOME_ENV, None)
    else:
        os.environ[HOME_ENV] = old


@pytest.fixture(autouse=True)
def farm_home_left_as_found(farm_home: Path) -> Iterator[None]:
    yield
    left = os.environ.get(HOME_ENV)
    if left != str(farm_home):
        os.environ[HOME_ENV] = str(farm_home)  # the next test starts in the run's home again
        pytest.fail(f"the test left {HOME_ENV}={left!r} (the run's is {farm_home}): set it with "
                    f"monkeypatch.setenv, which puts it back", pytrace=False)
