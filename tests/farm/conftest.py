"""Fixtures of the entry points' tests. Farms of real processes, in the spirit of dask's gen_cluster: a coordinator,
its tracker and agents on free loopback ports, a hard time limit, no process left behind."""

from __future__ import annotations

import time

import pytest

from farm.local_cluster import Cluster

# A cluster test that runs longer than this fails, whatever it waited for.
HARD_LIMIT_S = 600


@pytest.fixture
def make_cluster(tmp_path, registry_url):
    """Makes the test's Cluster with its coordinator settings; stops it and checks that no
    process was left behind."""
    made: list[Cluster] = []

    def make(**settings) -> Cluster:
        made.append(Cluster(tmp_path, registry_url, **settings))
        return made[-1]

    begin = time.monotonic()
    try:
        yield make
    finally:
        for cluster in made:
            stray = cluster.close()
            assert not stray, f"processes killed at the end: {stray}"
        assert time.monotonic() - begin < HARD_LIMIT_S, "cluster test exceeded its hard limit"


@pytest.fixture
def local_farm(make_cluster) -> Cluster:
    """A cluster with the default coordinator settings."""
    return make_cluster()
