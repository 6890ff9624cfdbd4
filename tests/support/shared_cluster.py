"""A cluster the tests of one module share, where they may: see ``module_cluster``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from farm.local_cluster import Cluster

# A cluster test (or a module's tests on one cluster) that runs longer than this fails, whatever it waited for.
HARD_LIMIT_S = 600


@contextmanager
def module_cluster(root: Path, registry_url: str, agents: tuple[str, ...] = (), **settings) -> Iterator[Cluster]:
    """A cluster the tests of one module share: its coordinator serving and ``agents`` registered
    before the first test, stopped and checked for leftovers after the last. Only for tests that
    neither stop nor break its processes and whose jobs do not depend on what another test's jobs
    left in its registry (each submits its own model and batch, or is refused before a job is
    made): one test run alone still passes. A coordinator and an agent cost about 10 s and 3
    CPU-seconds to start (docs/benchmarks.md, "The test suite's time")."""
    cluster = Cluster(root, registry_url, **settings)
    begin = time.monotonic()
    try:
        cluster.start_coordinator()
        for name in agents:
            cluster.start_agent(name)
        if agents:
            cluster.wait_agents(len(agents))
        yield cluster
    finally:
        stray = cluster.close()
        assert not stray, f"processes killed at the end: {stray}"
        assert time.monotonic() - begin < HARD_LIMIT_S, "the module's cluster tests exceeded their hard limit"
