"""A fixture that fails a test which leaves a process behind: everything it started, and what those
started in turn, is gone at its teardown."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil
import pytest


def _set_child_subreaper(on: bool) -> bool:
    # As a subreaper, this process adopts its orphaned descendants (e.g. TVM's PopenWorker when
    # its parent died first) instead of init, so children() below also sees those.
    PR_SET_CHILD_SUBREAPER = 36
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _live_descendants() -> dict[int, str]:
    found = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)  # adopted zombies are ours to reap
                continue
            found[proc.pid] = " ".join(proc.cmdline())
        except (psutil.Error, ChildProcessError):
            continue
    return found


@pytest.fixture
def leaves_no_process():
    """At teardown, every process the test started (and everything they started) is gone."""
    adopting = _set_child_subreaper(True)
    before = set(_live_descendants())
    yield
    end = time.monotonic() + 10
    while True:
        left = {pid: cmd for pid, cmd in _live_descendants().items() if pid not in before}
        if not left or time.monotonic() > end:
            break
        time.sleep(0.2)
    if adopting:
        _set_child_subreaper(False)
    for pid in left:  # do not leak them into the next test, then fail
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind: {left}"
