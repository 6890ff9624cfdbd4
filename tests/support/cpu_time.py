"""Each test's CPU time, as a JUnit property (`cpu_s`) that bench/suite_time.py reads.

Wall seconds on a box with more test workers than cores say how long a test waited for the
CPU as much as what it cost; CPU seconds say what it cost. Counted: the worker's own CPU and
that of every child process reaped during the test (its `farm` commands, clusters, builder
pools, their children when they in turn were reaped), from setup to teardown. Not counted: a
server outside the test's process tree (PostgreSQL), and the builder and runner workers of a
tune run in the test's own process: they are forked from that pytest worker's zygote
(foundation.meta_schedule.forked_workers), which reaps them and is reaped only when the pytest
worker exits, so their CPU counts in the run's total, not the test's.
"""

from __future__ import annotations

import resource

import pytest

PROPERTY = "cpu_s"
_STARTED = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """User and system CPU of this process and its reaped children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    item.stash[_STARTED] = cpu_seconds()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        # Set before pytest makes the teardown's report, which carries it into the JUnit XML.
        if _STARTED in item.stash:
            item.user_properties.append((PROPERTY, round(cpu_seconds() - item.stash[_STARTED], 2)))
