"""Two-phase trial plans: the first phase by the plan, the second to the tasks furthest from their ceilings."""

from __future__ import annotations

import random

import pytest

from foundation.domain.trial_phases import (
    CAP_FACTOR,
    FIRST_PHASE_SHARE,
    ceiling_ms,
    first_phase,
    first_phase_trials,
    merged,
    phased_cap,
    second_phase,
)
from foundation.domain.trial_plan import MEASURED_FLOOR, MINOR_TRIALS, TaskDemand, TrialPlan, plan_trials

PEAK = 100.0  # GFLOP/s
# resnet-18's shape at the quick start: eight 3x3 convolutions of about equal FLOPs, a few small tasks.
CONVS = [(f"fused_conv2d{i}_add_relu", 2.3e8, 1) for i in range(8)]
SMALL = [("max_pool2d", 8e5, 1), ("adaptive_avg_pool2d", 2.5e4, 1), ("reshape", 0.0, 1)]
ROWS = CONVS + SMALL


def demands(rows, speed_of=None, peak=PEAK):
    """Each task as measured at ``speed_of[name]`` of `PEAK` (None: not measured), its ceiling at ``peak``
    (None: not known)."""
    speed_of = speed_of or {}
    out = []
    for name, flop, weight in rows:
        speed = speed_of.get(name)
        measured = flop / (speed * PEAK * 1e6) if speed else None
        out.append(TaskDemand(name, flop, weight, measured, ceiling_ms=ceiling_ms(flop, weight, peak)))
    return out


def flop_plan(budget, rows=ROWS):
    return plan_trials([TaskDemand(n, f, w) for n, f, w in rows], budget, phased_cap(budget, len(rows)))


def test_the_cap_is_a_multiple_of_the_average():
    assert phased_cap(32 * 11, 11) == CAP_FACTOR * 32
    assert phased_cap(100, 3) == 100  # never above the budget
    assert phased_cap(0, 5) == 0 and phased_cap(10, 0) == 10


def test_the_first_phase_is_a_share_of_each_tasks_trials_and_measures_every_task():
    plan = first_phase(flop_plan(32 * len(ROWS)))
    first = first_phase_trials(plan)
    for line, trials in zip(plan.tasks, first):
        if line.minor:
            assert trials == line.trials <= MINOR_TRIALS
        else:
            assert trials == max(MEASURED_FLOOR, -(-line.trials * FIRST_PHASE_SHARE // 1))
    assert plan.phases == (sum(first), plan.total - sum(first))
    assert plan.trials == flop_plan(32 * len(ROWS)).trials  # the whole plan is kept: what one phase would tune
    assert first_phase_trials(flop_plan(64)) == flop_plan(64).trials  # a one-phase plan: all of it
    with pytest.raises(ValueError):
        first_phase(flop_plan(64), 0.0)


def test_the_second_phase_gives_the_laggard_the_trials():
    """resnet-18's case: equal FLOPs, so the first phase gives each convolution the same; then one of
    them measures at a third of the peak and the others near it."""
    budget = 32 * len(ROWS)
    plan = first_phase(flop_plan(budget))
    spent = first_phase_trials(plan)
    convs = [t for t in plan.tasks if t.name.startswith("fused_conv2d")]
    assert len({t.phases[0] for t in convs}) == 1  # by FLOPs the convolutions are all alike
    speeds = {name: 0.9 for name, _, _ in CONVS} | {"fused_conv2d5_add_relu": 0.33, "max_pool2d": 0.5,
                                                    "adaptive_avg_pool2d": 0.5}
    second = second_phase(plan, demands(ROWS, speeds), spent, PEAK)
    by_name = {t.name: t for t in second.tasks}
    laggard = by_name["fused_conv2d5_add_relu"]
    others = [t for t in second.tasks if t.name.startswith("fused_conv2d") and t is not laggard]
    assert laggard.phases[1] > 3 * max(t.phases[1] for t in others)
    assert laggard.trials <= plan.per_task_cap == CAP_FACTOR * 32
    assert laggard.loss_ms == pytest.approx(2.3e8 / (0.33 * PEAK * 1e6) - 2.3e8 / (PEAK * 1e6))
    assert second.total <= plan.total and second.phases == (sum(spent), second.total - sum(spent))
    assert all(t.trials == sum(t.phases) for t in second.tasks)
    assert second.peak_gflops == PEAK
    # The same times with no ceiling known: by time alone, the slow convolution still leads, by less.
    no_ceiling = second_phase(plan, demands(ROWS, speeds, peak=None), spent)
    assert no_ceiling.tasks[5].phases[1] < laggard.phases[1]


def test_a_heavy_task_at_its_ceiling_gives_way_to_a_light_one_far_from_it():
    rows = [("heavy", 1e9, 1), ("light", 2e8, 1)]
    plan = first_phase(plan_trials([TaskDemand(n, f, w) for n, f, w in rows], 100, 80))
    measured = demands(rows, {"heavy": 0.95, "light": 0.25})
    assert measured[0].measured_ms > measured[1].measured_ms  # the heavy one takes longer...
    second = second_phase(plan, measured, first_phase_trials(plan), PEAK)
    assert second.tasks[1].phases[1] > second.tasks[0].phases[1]  # ... but the light one loses more


def test_a_probe_below_what_kernels_reach_still_ranks_the_tasks_by_what_they_lose():
    """The Ice Lake case: the probe read 224 GFLOP/s and tuned convolutions 319. Taken at the probe's
    peak, every kernel faster than it loses nothing and gets no second-phase trials; taken at the
    fastest kernel's rate, the slowest kernel loses most and the fastest nothing."""
    rows = [("fast", 1e9, 1), ("middling", 1e9, 1), ("slow", 1e9, 1)]
    plan = first_phase(plan_trials([TaskDemand(n, f, w) for n, f, w in rows], 300, 200))
    speeds = {"fast": 1.4, "middling": 1.2, "slow": 0.5}  # of PEAK: the first two beat the probe
    second = second_phase(plan, demands(rows, speeds), first_phase_trials(plan), PEAK)
    fast, middling, slow = second.tasks
    assert fast.loss_ms == 0.0 and 0.0 < middling.loss_ms < slow.loss_ms
    assert slow.phases[1] > middling.phases[1] > fast.phases[1]
    # The ceilings taken at the fastest kernel's rate: the middling one loses 1/1.2 - 1/1.4 of the work's
    # time at PEAK (1e9 FLOP at 100 GFLOP/s: 10 ms).
    assert middling.loss_ms == pytest.approx(10.0 / 1.2 - 10.0 / 1.4)
    # Without that evidence (every kernel below the probe's peak) the ceilings stay at the probe's.
    below = second_phase(plan, demands(rows, {"fast": 0.9, "middling": 0.7, "slow": 0.5}),
                         first_phase_trials(plan), PEAK)
    assert below.tasks[0].loss_ms == pytest.approx(10.0 / 0.9 - 10.0)


def test_a_user_cap_holds_in_both_phases():
    budget, cap = 32 * len(ROWS), 32
    plan = first_phase(plan_trials([TaskDemand(n, f, w) for n, f, w in ROWS], budget, cap))
    second = second_phase(plan, demands(ROWS, {name: 0.3 if name.endswith("5_add_relu") else 0.9
                                               for name, _, _ in CONVS}), first_phase_trials(plan), PEAK)
    assert max(second.trials) <= cap


def test_trials_the_first_phase_did_not_spend_go_to_the_second():
    plan = first_phase(flop_plan(200, CONVS))
    spent = [max(0, t - 3) for t in first_phase_trials(plan)]  # a search that ran out of candidates early
    second = second_phase(plan, demands(CONVS, {name: 0.5 for name, _, _ in CONVS}), spent, PEAK)
    assert second.total == plan.total == 200


def test_random_plans_stay_within_budget_and_cap():
    rng = random.Random(3)
    for _ in range(300):
        rows = [(f"t{i}", rng.choice([0.0, rng.uniform(1e3, 1e5), rng.uniform(1e7, 1e9)]), rng.randint(1, 4))
                for i in range(rng.randint(1, 20))]
        budget = rng.randint(0, 1500)
        cap = rng.choice([None, rng.randint(1, 200)])
        whole = plan_trials([TaskDemand(n, f, w) for n, f, w in rows], budget,
                            cap if cap is not None else phased_cap(budget, len(rows)))
        plan = first_phase(whole)
        first = first_phase_trials(plan)
        assert all(0 <= f <= t for f, t in zip(first, plan.trials))
        spent = [rng.randint(max(0, f - 2), f) for f in first]
        speeds = {n: rng.uniform(0.05, 1.2) for n, _, _ in rows if rng.random() < 0.8}
        second = second_phase(plan, demands(rows, speeds), spent, PEAK)
        assert second.total <= whole.total
        assert max(second.trials, default=0) <= whole.per_task_cap
        assert second == second_phase(plan, demands(rows, speeds), spent, PEAK)  # the same every time


def test_phases_round_trip_through_json_and_merge_into_the_jobs_plan():
    plan = first_phase(flop_plan(32 * len(ROWS)))
    document = plan.to_json()
    assert document["phases"] == list(plan.phases) and document["tasks"][0]["phases"] == [plan.tasks[0].phases[0]]
    assert TrialPlan.from_json(document).to_json() == document
    second = second_phase(plan, demands(ROWS, {name: 0.5 for name, _, _ in ROWS}), first_phase_trials(plan), PEAK)
    assert TrialPlan.from_json(second.to_json()).to_json() == second.to_json()
    assert second.to_json()["tasks"][0]["loss_ms"] > 0
    # The job's plan holds a skipped task the tuner never saw: it keeps its line.
    skipped = TrialPlan(plan.tasks + (plan_trials([TaskDemand("skipped", 1e6, 1)], 0).tasks[0],), plan.budget,
                        plan.per_task_cap, plan.phases)
    whole = merged(skipped, second)
    assert whole.tasks[:-1] == second.tasks and whole.tasks[-1].name == "skipped"
    assert whole.phases == second.phases and whole.peak_gflops == PEAK


def test_an_old_plan_without_phases_reads_as_one():
    document = flop_plan(64).to_json()
    assert "phases" not in document and "peak_gflops" not in document
    assert TrialPlan.from_json(document).phases == ()
