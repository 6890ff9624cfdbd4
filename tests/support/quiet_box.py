"""The box to itself for a test whose assertions rest on measured speed differences, while
pytest-xdist runs other tests beside it: a readers-writer lock over the run's test processes.

Every test holds the lock shared (tests/conftest.py); ``quiet_box()`` holds it exclusively, so
it waits for the tests under way in other workers to end and holds theirs back until it is done.
A turnstile lock taken before the shared one lets a waiting exclusive holder in first; without
it, the workers' back-to-back shared holds would keep it out until their queues ran dry.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path


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
