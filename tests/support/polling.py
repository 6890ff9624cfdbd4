"""Waiting in tests for something another thread or process does: poll, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """The first truthy value of ``predicate()``; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


def process_gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (or is a zombie waiting to be reaped) within ``within`` seconds."""
    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
