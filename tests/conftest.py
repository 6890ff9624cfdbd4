"""Fixtures for every test: the `farm` executable, empty registries (the run's own farm home:
support.farm_home)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from foundation.config import MIN_REPEAT_MS_ENV
from foundation.processes.heap import tune_collector
from foundation.registry import RegistryStore

from support.registry_db import BACKENDS, POSTGRES_URL, admin_url, database_name, fresh_postgres_database
from support.scheduling import LongestFirstFileScheduling, order_longest_first

# pytester: tests/test_suite_scheduling.py collects small suites of its own; support.cpu_time: each
# test's CPU seconds in the JUnit report (bench/suite_time.py); support.quiet_box: each test holds
# the box shared while a measurement a test ranks is taken, and the box_locks fixture;
# support.descendants: the leaves_no_process fixture; support.farm_home: the run's FARM_HOME, kept
# by every test.
pytest_plugins = ["pytester", "support.cpu_time", "support.quiet_box", "support.descendants", "support.farm_home"]

# The test processes hold TVM, Relax and every test module for the whole run, like a farm
# process holds TVM: the farm's collector thresholds, not Python's (foundation.processes.heap).
tune_collector()

# What every process of the run inherits (the farm commands, daemons and workers its tests start).
# The suite runs one more worker than the box has cores, and each tune adds builder and runner
# processes: the cores are always taken, and a thread pool that spins while it waits for work takes
# the CPU another test's process needs. No test asserts a timing, so the run's processes wait
# without spinning, and time candidates for 5 ms a repeat, as the tests that tune in-process do
# (MeasureSettings(min_repeat_ms=5)). What each saves: docs/benchmarks.md, "The test suite's time".
# Set already, the caller's value stands.
_SUITE_ENVIRONMENT = {
    "TVM_THREAD_POOL_SPIN_COUNT": "0",  # TVM's pool: sleep between parallel kernels, no sched_yield loop
    "OMP_WAIT_POLICY": "PASSIVE",  # xgboost's OpenMP threads (the cost model), likewise
    "OPENBLAS_NUM_THREADS": "1",  # NumPy's BLAS: no idle server threads polling beside the tests
    MIN_REPEAT_MS_ENV: "5",
}
for _name, _value in _SUITE_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

# Ctrl-C as a terminal's foreground job has it. A shell that starts the run in the background
# (`scripts/test &` in a script, nohup, a runner without job control) starts it with SIGINT and
# SIGQUIT ignored, an ignored signal stays ignored across fork and exec, and every `farm` command a
# test starts would inherit that: the tests that press Ctrl-C in one (tests/farm/cli/
# test_command_interrupts.py) then waited out their timeouts and failed. Set here, in each worker,
# so the processes the tests start begin with both at their defaults (tests/test_suite_signals.py).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (scripts/test) hands out the longest work first; see support.scheduling."""
    if config.getvalue("dist") == "loadfile":
        return LongestFirstFileScheduling(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the run's work queue
        order_longest_first(items)


@pytest.fixture(scope="session")
def farm_exe() -> str:
    """The installed `farm` console script of the interpreter running the tests."""
    candidate = Path(sys.executable).with_name("farm")
    exe = str(candidate) if candidate.exists() else shutil.which("farm")
    if exe is None:
        pytest.fail("the `farm` executable is not installed: run scripts/setup")
    return exe


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Any]:
    """An AUTOCOMMIT engine on the server's maintenance database, or a skip."""
    engine = create_engine(
        admin_url(), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        engine.dispose()
        pytest.skip(
            f"PostgreSQL not reachable at {make_url(POSTGRES_URL).render_as_string()}: "
            f"{str(exc.orig).splitlines()[0]}; set FARM_TEST_POSTGRES_URL"
        )
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def postgres_registry_template(postgres_admin) -> Iterator[str]:
    """The name of a PostgreSQL database holding the registry's schema and no rows, made once per test
    process: the databases of tests that open a `store` are copies of it, not built table by table
    each time (0.25 CPU-s a database on a Zen 3, a copy 0.1)."""
    url, drop = fresh_postgres_database(postgres_admin)
    RegistryStore(url).dispose()  # no connection left to it: a template copies only when none is open
    try:
        yield database_name(url)
    finally:
        drop()


@pytest.fixture(params=BACKENDS)
def registry_url(request, tmp_path) -> Iterator[str]:
    """The URL of an empty database (no schema yet) on each backend; with the schema on PostgreSQL
    where the test opens a `store` (which would create it before the test ran)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry' / 'registry.db'}"
        return
    admin = request.getfixturevalue("postgres_admin")
    template = request.getfixturevalue("postgres_registry_template") if "store" in request.fixturenames else None
    url, drop = fresh_postgres_database(admin, template)
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def store(registry_url) -> Iterator[RegistryStore]:
    registry = RegistryStore(registry_url)
    try:
        yield registry
    finally:
        registry.dispose()
