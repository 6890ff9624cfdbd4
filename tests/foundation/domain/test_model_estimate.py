"""The model's estimated latency exists from the first measured task with FLOPs, and says how much is estimated."""

from __future__ import annotations

import pytest

from foundation.domain.model_estimate import ModelEstimate, model_estimate
from foundation.domain.trial_plan import TaskDemand, estimated_task_ms, latency_shares

# Three convolutions and a reshape (FLOPs of one call, calls per inference).
TASKS = [("conv_a", 2e6, 1), ("conv_b", 4e6, 2), ("conv_c", 1e6, 1), ("reshape", 0.0, 1)]


def demands(measured: dict[str, float]) -> list[TaskDemand]:
    return [TaskDemand(name, flop, weight, measured.get(name)) for name, flop, weight in TASKS]


def test_nothing_measured_gives_no_estimate():
    assert model_estimate(demands({})) is None
    assert model_estimate([]) is None


def test_one_measured_task_of_several_gives_an_estimate_that_counts_the_others_as_estimated():
    # conv_a: 2 MFLOP in 0.5 ms, 4 GFLOP/s; the others at that rate: conv_b 1 ms x 2 calls, conv_c 0.25 ms.
    estimate = model_estimate(demands({"conv_a": 0.5}))
    assert estimate == ModelEstimate(pytest.approx((0.5 + 2.0 + 0.25 + 0.0) / 1e3), estimated_tasks=3)
    assert not estimate.measured
    assert estimate.to_json() == {"latency_ms": pytest.approx(2.75), "estimated_tasks": 3}


def test_the_estimate_is_each_task_best_by_its_calls_once_every_task_is_measured():
    estimate = model_estimate(demands({"conv_a": 0.5, "conv_b": 1.0, "conv_c": 0.1, "reshape": 0.01}))
    assert estimate == ModelEstimate(pytest.approx((0.5 + 2.0 + 0.1 + 0.01) / 1e3), estimated_tasks=0)
    assert estimate.measured


def test_a_measured_task_without_flops_gives_no_rate_to_estimate_the_others_at():
    assert model_estimate(demands({"reshape": 0.01})) is None
    assert estimated_task_ms(demands({"reshape": 0.01})) is None
    # With one that has FLOPs, the reshape counts at its measured time, and in the rate: 1 MFLOP in 0.26 ms.
    estimate = model_estimate(demands({"reshape": 0.01, "conv_c": 0.25}))
    per_mflop = 0.26
    assert estimate.estimated_tasks == 2
    assert estimate.seconds == pytest.approx((2 * per_mflop + 8 * per_mflop + 0.25 + 0.01) / 1e3)


def test_the_trial_plan_shares_are_the_estimate_per_task_normalised():
    tasks = demands({"conv_a": 0.5})
    per_task = estimated_task_ms(tasks)
    assert per_task == pytest.approx([0.5, 2.0, 0.25, 0.0])
    assert latency_shares(tasks) == pytest.approx([c / sum(per_task) for c in per_task])
