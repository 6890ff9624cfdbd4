"""The box to itself for a test whose assertions rest on measured speed differences, while
pytest-xdist runs other tests beside it: a readers-writer lock over the run's test processes.

Every test holds the lock shared from the set-up of its first fixture to the end of its
teardown (this plugin's ``pytest_runtest_protocol``), so a module or session fixture that
starts a cluster or tunes a registry holds it too; ``quiet_box()`` holds it exclusively, so it
waits for the tests under way in other workers to end and holds theirs back until it is done.
A turnstile lock taken before the shared one lets a waiting exclusive holder in first; without
it, the workers' back-to-back shared holds would keep it out until their queues ran dry.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def shared_box(directory: Path) -> Iterator[None]:
    with ExitStack() as stack:
        with _flock(directory / "turnstile.lock", fcntl.LOCK_EX):
            stack.enter_context(_flock(directory / "box.lock", fcntl.LOCK_SH))
        yield


@contextmanager
def quiet_box(directory: Path) -> Iterator[None]:
    with _flock(directory / "turnstile.lock", fcntl.LOCK_EX), _flock(directory / "box.lock", fcntl.LOCK_EX):
        yield


@dataclass
class Elsewhere:
    """The CPU that processes outside this one's tree took while the box was held: what a quiet
    measurement's assertion should print when it fails (a process that started and ended within
    the hold is missed)."""

    cpu_s: float = 0.0
    busiest: list[tuple[str, float]] = field(default_factory=list)
    steal_s: float = 0.0  # what the hypervisor gave other machines of this VM's CPU time, all cores


def _cpu_outside(tree: set[int]) -> dict[int, tuple[str, float]]:
    seconds = {}
    for process in psutil.process_iter(["name", "cpu_times"]):
        times = process.info["cpu_times"]
        if process.pid not in tree and times is not None:
            seconds[process.pid] = (process.info["name"], times.user + times.system)
    return seconds


def _steal_s() -> float:
    return float(getattr(psutil.cpu_times(), "steal", 0.0))  # Linux's, 0 elsewhere


def _tree() -> set[int]:
    me = psutil.Process(os.getpid())
    return {me.pid} | {child.pid for child in me.children(recursive=True)}


@contextmanager
def cpu_elsewhere() -> Iterator[Elsewhere]:
    """Measure the CPU taken outside this process's tree (its workers, their zygote) in the block."""
    elsewhere = Elsewhere()
    before, steal = _cpu_outside(_tree()), _steal_s()
    yield elsewhere
    after = _cpu_outside(_tree())
    elsewhere.steal_s = round(_steal_s() - steal, 2)
    taken = {f"{name} ({pid})": cpu - before.get(pid, (name, 0.0))[1] for pid, (name, cpu) in after.items()}
    elsewhere.cpu_s = round(sum(taken.values()), 2)
    elsewhere.busiest = [(name, round(cpu, 2)) for name, cpu in sorted(taken.items(), key=lambda kv: -kv[1])[:5]]


def box_lock_directory(config: pytest.Config) -> Path:
    """The run's own: the parent of this process's temporary directory (under pytest-xdist, the
    workers' directories are in it)."""
    # What the tmp_path_factory fixture returns; a hook has no fixtures to ask.
    return config._tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def box_locks(pytestconfig: pytest.Config) -> Path:
    """Where test processes share the box's lock: for a module fixture's quiet_box()."""
    return box_lock_directory(pytestconfig)


@pytest.fixture(autouse=True)
def _shares_the_box(request: pytest.FixtureRequest, box_locks: Path) -> Iterator[None]:
    """A test marked quiet_box holds the box shared once its module's fixtures, one of which took
    the box alone, are set up; every other test holds it from the start of its set-up
    (pytest_runtest_protocol below)."""
    if request.node.get_closest_marker("quiet_box") is None:
        yield
        return
    with shared_box(box_locks):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    # A test marked quiet_box is left out: one of its module's fixtures takes the box alone in its
    # set-up (flock would wait on this process's own shared hold), and the test holds it shared
    # from its own set-up on (_shares_the_box above).
    if item.get_closest_marker("quiet_box") is not None:
        return (yield)
    with shared_box(box_lock_directory(item.config)):
        return (yield)
