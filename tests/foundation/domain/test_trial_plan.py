"""The trial plan: trials go where the model's latency is, within the budget, the same every time."""

from __future__ import annotations

import itertools
import random

import pytest

from foundation.domain.trial_plan import (
    MEASURED_FLOOR,
    MINOR_TRIALS,
    TaskDemand,
    TrialPlan,
    in_model_losses,
    latency_shares,
    plan_trials,
    reached_ceilings,
)

# resnet-tiny's 12 tasks on llvm (name, FLOPs per call, weight), as extract_tuning_tasks gives them.
RESNET_TINY = [
    ("adaptive_avg_pool2d", 4.16e3, 1), ("fused_conv2d6_multiply2_add4_add5_relu2", 4.73e6, 1),
    ("fused_conv2d7_multiply2_add4", 2.7e5, 1), ("fused_matmul_add6", 1.29e3, 1),
    ("fused_conv2d4_multiply1_add2", 2.79e5, 1), ("fused_conv2d2_multiply1_add2_relu1", 2.38e6, 1),
    ("reshape", 0.0, 1), ("fused_conv2d1_multiply_add_add1_relu", 4.78e6, 1),
    ("fused_conv2d3_multiply1_add2_add3_relu1", 4.75e6, 1), ("fused_conv2d1_multiply_add_relu", 4.77e6, 1),
    ("fused_conv2d5_multiply2_add4_relu2", 2.37e6, 1), ("fused_conv2d_multiply_add_relu", 9.34e5, 1),
]
# A 9-task CNN shaped like the one whose largest convolution got no trials from `--trials 48`.
SMALL_CNN = [("reshape", 0.0, 1), ("transpose", 0.0, 1), ("max_pool2d", 2.0e5, 1), ("fused_add_relu", 5e4, 2),
             ("fused_conv2d_add_relu", 8.0e7, 1), ("fused_conv2d1_add_relu", 3.0e8, 1),
             ("fused_conv2d2_add", 1.2e8, 2), ("fused_matmul_add", 1.0e6, 1), ("softmax", 5e3, 1)]


def demands(rows, measured=None):
    measured = measured or {}
    return [TaskDemand(name, flop, weight, measured.get(name)) for name, flop, weight in rows]


def random_tasks(rng: random.Random, n: int) -> list[TaskDemand]:
    return [TaskDemand(f"t{i}", rng.choice([0.0, rng.uniform(0, 1e4), rng.uniform(1e5, 1e9)]),
                       rng.randint(1, 12), rng.choice([None, rng.uniform(1e-3, 5.0)])) for i in range(n)]


def test_the_budget_is_never_exceeded():
    rng = random.Random(7)
    for _ in range(500):
        tasks = random_tasks(rng, rng.randint(1, 40))
        budget = rng.randint(0, 3000)
        cap = rng.choice([None, rng.randint(1, 600)])
        plan = plan_trials(tasks, budget, cap)
        assert plan.total <= budget
        assert all(t >= 0 for t in plan.trials)
        assert max(plan.trials) <= (budget if cap is None else cap)
        assert [t.name for t in plan.tasks] == [t.name for t in tasks]


def test_the_budget_is_spent_unless_every_task_is_capped():
    for budget in (10, 48, 64, 333, 1000):
        plan = plan_trials(demands(SMALL_CNN), budget)
        assert plan.total == budget
    capped = plan_trials(demands(RESNET_TINY), 10_000, per_task_cap=16)
    assert all(t.trials == (MINOR_TRIALS if t.minor else 16) for t in capped.tasks)
    assert capped.total < 10_000


def test_the_dominant_task_gets_most():
    for budget in (12, 48, 200, 2000):
        plan = plan_trials(demands(SMALL_CNN), budget)
        trials = dict(zip([t.name for t in plan.tasks], plan.trials))
        assert trials["fused_conv2d1_add_relu"] == max(plan.trials), (budget, trials)
        # ... and the two-call conv2d2 (2 x 1.2e8 of work) comes next, before the one-call conv2d (8e7).
        assert trials["fused_conv2d2_add"] >= trials["fused_conv2d_add_relu"], (budget, trials)


def test_with_48_trials_the_largest_convolution_gets_more_than_reshape_and_transpose():
    plan = plan_trials(demands(SMALL_CNN), 48)
    trials = dict(zip([t.name for t in plan.tasks], plan.trials))
    assert trials["reshape"] == trials["transpose"] == 0  # 10% of 48 over four minor tasks is one trial each at most
    assert trials["fused_conv2d1_add_relu"] > 16
    assert sum(trials[n] for n in ("fused_conv2d_add_relu", "fused_conv2d1_add_relu", "fused_conv2d2_add")) >= 40


def test_tasks_with_nothing_to_tune_are_capped():
    plan = plan_trials(demands(RESNET_TINY), 5000)
    by_name = {t.name: t for t in plan.tasks}
    for name in ("adaptive_avg_pool2d", "fused_matmul_add6", "reshape"):
        assert by_name[name].minor
        assert by_name[name].trials == MINOR_TRIALS
    assert not by_name["fused_conv2d7_multiply2_add4"].minor  # a 1% convolution is tuned
    assert plan.total == 5000


def test_every_task_that_matters_is_measured_when_the_budget_allows():
    plan = plan_trials(demands(RESNET_TINY), 64)
    majors = [t for t in plan.tasks if not t.minor]
    assert len(majors) == 9
    assert all(t.trials >= MEASURED_FLOOR for t in majors)
    big = [t.trials for t in majors if t.share > 0.15]
    small = [t.trials for t in majors if t.share < 0.05]
    assert min(big) > max(small)
    # A budget smaller than the tasks that matter goes to the largest ones first.
    tiny = plan_trials(demands(RESNET_TINY), 5)
    largest = sorted(tiny.tasks, key=lambda t: -t.share)[:5]
    assert [t.trials for t in largest] == [1, 1, 1, 1, 1] and tiny.total == 5


def test_the_plan_is_deterministic():
    rng = random.Random(11)
    for _ in range(50):
        tasks = random_tasks(rng, rng.randint(1, 25))
        budget, cap = rng.randint(0, 2000), rng.choice([None, 32])
        assert plan_trials(tasks, budget, cap) == plan_trials(list(tasks), budget, cap)
    # Equal tasks differ only by position: ties go to the earlier one.
    equal = [TaskDemand(f"t{i}", 1e6, 1) for i in range(3)]
    assert plan_trials(equal, 13).trials == [5, 4, 4]


def test_measured_times_move_the_shares():
    flop_only = latency_shares(demands(SMALL_CNN))
    # The largest convolution has been tuned well (fast for its FLOPs); conv2d runs slowly.
    measured = latency_shares(demands(SMALL_CNN, {"fused_conv2d1_add_relu": 1.0, "fused_conv2d_add_relu": 4.0}))
    names = [name for name, _, _ in SMALL_CNN]
    big, slow = names.index("fused_conv2d1_add_relu"), names.index("fused_conv2d_add_relu")
    assert measured[slow] > measured[big]
    assert flop_only[slow] < flop_only[big]
    assert sum(measured) == pytest.approx(1.0)
    plan = plan_trials(demands(SMALL_CNN, {"fused_conv2d1_add_relu": 1.0, "fused_conv2d_add_relu": 4.0}), 200)
    assert plan.tasks[slow].trials > plan.tasks[big].trials
    assert plan.tasks[slow].measured and not plan.tasks[names.index("reshape")].measured


def test_degenerate_inputs():
    assert plan_trials([], 100).trials == []
    assert plan_trials(demands(SMALL_CNN), 0).total == 0
    no_flops = [TaskDemand(f"t{i}", 0.0, 1) for i in range(4)]
    assert plan_trials(no_flops, 8).trials == [2, 2, 2, 2]  # nothing known: an even split
    with pytest.raises(ValueError):
        plan_trials(demands(SMALL_CNN), -1)


def test_the_plan_round_trips_through_json():
    plan = plan_trials(demands(SMALL_CNN, {"fused_conv2d_add_relu": 4.0}), 100, 40)
    document = plan.to_json()
    assert document["planned"] == plan.total
    assert TrialPlan.from_json(document).trials == plan.trials
    assert [t["task"] for t in document["tasks"]] == [name for name, _, _ in SMALL_CNN]


@pytest.mark.parametrize("budget,cap", list(itertools.product((1, 7, 64, 512), (None, 1, 16))))
def test_no_task_exceeds_the_cap(budget, cap):
    plan = plan_trials(demands(RESNET_TINY), budget, cap)
    assert all(t <= (cap or budget) for t in plan.trials)
    assert plan.total <= budget


def test_trials_spent_in_earlier_rounds_count_against_the_cap_and_the_floor():
    tasks = demands(RESNET_TINY)
    first = plan_trials(tasks, 64, per_task_cap=12)
    second = plan_trials(tasks, 64, per_task_cap=12, spent=first.trials)
    assert second.total <= 64
    for before, now, line in zip(first.trials, second.trials, second.tasks):
        assert before + now <= (MINOR_TRIALS if line.minor else 12)
    # Every task that matters was measured in the first round: no floor again, all by share.
    uncapped = plan_trials(tasks, 64, spent=plan_trials(tasks, 64).trials)
    assert uncapped.total == 64
    big = [now for now, line in zip(uncapped.trials, uncapped.tasks) if line.share > 0.15]
    small = [now for now, line in zip(uncapped.trials, uncapped.tasks) if not line.minor and line.share < 0.05]
    assert min(big) > 2 * max(small)
    spent_out = plan_trials(tasks, 64, per_task_cap=4, spent=[4] * len(tasks))
    assert spent_out.total == 0
    with pytest.raises(ValueError):
        plan_trials(tasks, 64, spent=[1])


def test_a_budget_that_covers_every_cap_rations_nothing():
    # `--trials-per-task 2` alone: 2 x 12 trials, each task at most 2; tasks with nothing to tune get theirs too.
    plan = plan_trials(demands(RESNET_TINY), 24, per_task_cap=2)
    assert plan.trials == [2] * 12
    # The same budget with no per-task cap is rationed: the minor tasks' 10% is 2 trials over 3 tasks.
    rationed = plan_trials(demands(RESNET_TINY), 24)
    assert sum(t.trials for t in rationed.tasks if t.minor) == 0


def test_in_model_times_send_the_trials_to_what_the_model_loses():
    # "a" is fast alone but slow in the model (its weights stream from memory there); "b" is slower
    # alone and runs at its ceiling in the model.
    alone = [TaskDemand("a", 1e9, 1, measured_ms=1.0), TaskDemand("b", 1e9, 1, measured_ms=5.0)]
    by_records = plan_trials(alone, 100)
    assert by_records.trials[1] > by_records.trials[0]
    in_model = [TaskDemand("a", 1e9, 1, measured_ms=1.0, in_model_ms=9.0, ceiling_ms=1.0),
                TaskDemand("b", 1e9, 1, measured_ms=5.0, in_model_ms=5.2, ceiling_ms=5.0)]
    plan = plan_trials(in_model, 100)
    assert plan.trials[0] > plan.trials[1] and plan.total == 100
    assert plan.tasks[0].in_model_ms == 9.0 and plan.tasks[0].loss_ms == pytest.approx(8.0)
    assert plan.tasks[0].share == pytest.approx(8.0 / 8.2)
    assert TrialPlan.from_json(plan.to_json()).tasks[0].loss_ms == pytest.approx(8.0)
    assert plan.to_json()["tasks"][0]["loss_ms"] == pytest.approx(8.0)
    assert "in_model_ms" not in by_records.to_json()["tasks"][0]  # a plan from the records says nothing of it


def test_ceilings_are_no_tighter_than_a_kernel_in_the_model_has_gone():
    """A kernel timed in the model at twice the rate the ceilings were taken at: every ceiling halves,
    so the other kernel's loss is counted against what the box has shown, not against a slow probe."""
    tasks = [TaskDemand("quick", 1e9, 1, measured_ms=0.5, in_model_ms=0.5, ceiling_ms=1.0),
             TaskDemand("lagging", 1e9, 1, measured_ms=1.0, in_model_ms=2.0, ceiling_ms=1.0),
             TaskDemand("unknown", 0.0, 1)]
    assert reached_ceilings(tasks) == [0.5, 0.5, 0.0]
    assert in_model_losses(tasks) == [0.0, 1.5, 0.0]
    assert reached_ceilings([TaskDemand("slow", 1e9, 1, measured_ms=2.0, ceiling_ms=1.0)]) == [1.0]
    assert reached_ceilings([TaskDemand("no_ceiling", 1e9, 1, measured_ms=0.1)]) == [0.0]


def test_a_kernel_at_its_ceiling_in_the_model_is_left_with_the_minor_trials():
    tasks = [TaskDemand("at_ceiling", 1e9, 1, measured_ms=4.0, in_model_ms=4.0, ceiling_ms=4.0),
             TaskDemand("far", 1e8, 1, measured_ms=0.5, in_model_ms=3.0, ceiling_ms=0.5),
             TaskDemand("unseen", 1e8, 1, measured_ms=1.0)]  # not recognised in the model: its records' time
    plan = plan_trials(tasks, 60, per_task_cap=60)
    at_ceiling, far, unseen = plan.tasks
    assert at_ceiling.minor and at_ceiling.trials <= MINOR_TRIALS and at_ceiling.loss_ms == 0.0
    assert far.trials > unseen.trials > 0 and unseen.in_model_ms is None
    assert far.share == pytest.approx(2.5 / 3.5) and unseen.share == pytest.approx(1.0 / 3.5)
