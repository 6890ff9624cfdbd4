"""Fixtures of the entry points' tests. Farms of real processes, in the spirit of dask's gen_cluster: a coordinator,
its tracker and agents on free loopback ports, a hard time limit, no process left behind."""

from __future__ import annotations

import time

import pytest

from farm.local_cluster import Cluster

from support.shared_cluster import HARD_LIMIT_S
from support.tuned_registry import TunedHome, run_directory, tuned_home


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


# Homes where a model was tuned for real once per test run (support.tuned_registry); tests take copies.
# test_cli_e2e's: mlp-tiny at batch 2, a budget that gives each of its tasks candidates.
MLP_TINY_LLVM_2 = ["mlp-tiny", "llvm", "2", "--trials", "12", "--trials-per-task", "8", "--runs", "3"]
# The warm-start tests' donors: mlp-tiny at batch 4, cold, plain weights.
# 5 trials a task: each task's untuned form, then 4 searched (the donors' schedules the tests transplant).
MLP_TINY_LLVM_4_COLD = ["mlp-tiny", "llvm", "4", "--trials-per-task", "5", "--runs", "2", "--weights-layout", "plain",
                        "--cold"]


@pytest.fixture(scope="session")
def tuned_mlp_tiny(tmp_path_factory, farm_exe) -> TunedHome:
    """The home where `farm submit mlp-tiny llvm 2` tuned; tests take a copy (``copy_to``)."""
    return tuned_home(run_directory(tmp_path_factory.getbasetemp()), "mlp-tiny-llvm-2", farm_exe, MLP_TINY_LLVM_2)


@pytest.fixture(scope="session")
def tuned_mlp_tiny_batch_4(tmp_path_factory, farm_exe) -> TunedHome:
    """The home where `farm submit mlp-tiny llvm 4 --cold --weights-layout plain` tuned; tests copy its registry."""
    return tuned_home(run_directory(tmp_path_factory.getbasetemp()), "mlp-tiny-llvm-4-cold", farm_exe,
                      MLP_TINY_LLVM_4_COLD)
