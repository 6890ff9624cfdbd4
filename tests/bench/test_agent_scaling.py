"""bench/agent_scaling.py gives each agent cores of its own, after the ones it leaves to the coordinator."""

import os

import pytest
from agent_scaling import core_sets


def test_agents_get_disjoint_cores_after_the_reserved_ones():
    cores = sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
    sets = core_sets([1], 1, reserved=len(cores) - 1)
    assert sets == [[cores[-1]]]


def test_too_few_cores_are_refused_in_one_line():
    cores = len(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))
    with pytest.raises(SystemExit) as refused:
        core_sets([1, 2, 4, 8], 2, reserved=cores - 1)
    assert str(refused.value) == (f"error: 8 agents of 2 core(s) need 16 cores after the first {cores - 1}, this box "
                                  "has 1 (give fewer --agents or --cores-per-agent)")
