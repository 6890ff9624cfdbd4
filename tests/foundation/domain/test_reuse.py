"""Which tasks a job reuses, and what that saves (pure)."""

from __future__ import annotations

import pytest

from foundation.domain.reuse import ReuseMode, ReuseSummary, TaskAction, TaskHistory, plan_reuse

# Three tasks: never measured, measured a little, measured more than one plan's worth.
HISTORY = [TaskHistory("new", 0), TaskHistory("some", 5), TaskHistory("plenty", 40)]


def _actions(plan):
    return [(t.name, t.action, t.trials) for t in plan.tasks]


def test_auto_skips_what_was_tuned_as_hard_and_tops_up_the_rest():
    plan = plan_reuse("auto", HISTORY, planned_per_task=32, trials_per_batch=16, planned_trials=96)
    assert _actions(plan) == [("new", TaskAction.TUNE, 32), ("some", TaskAction.TOPUP, 16),
                              ("plenty", TaskAction.SKIP, 0)]
    assert (plan.reused, plan.skipped, plan.topped_up, plan.trials, plan.trials_saved) == (2, 1, 1, 48, 48)
    assert [t.name for t in plan.to_tune()] == ["new", "some"]
    assert plan.describe() == ("reused 2 of 3 tasks (1 skipped, 1 topped up with 16 trials): "
                               "48 of 96 planned trials saved")


def test_full_skips_every_measured_task_and_topup_tops_each_up():
    full = plan_reuse(ReuseMode.FULL, HISTORY, 32, 16, 96)
    assert _actions(full) == [("new", TaskAction.TUNE, 32), ("some", TaskAction.SKIP, 0),
                              ("plenty", TaskAction.SKIP, 0)]
    assert (full.trials, full.trials_saved) == (32, 64)
    topup = plan_reuse(ReuseMode.TOPUP, HISTORY, 32, 16, 96)
    assert _actions(topup)[1:] == [("some", TaskAction.TOPUP, 16), ("plenty", TaskAction.TOPUP, 16)]
    assert (topup.trials, topup.trials_saved) == (64, 32)


def test_off_and_a_registry_with_nothing_change_nothing():
    off = plan_reuse("off", HISTORY, 32, 16, 96)
    assert all(t.action is TaskAction.TUNE for t in off.tasks) and (off.trials, off.reused) == (96, 0)
    assert off.describe() == "reuse off: every task tuned with its plan"
    fresh = plan_reuse("auto", [TaskHistory("a", 0), TaskHistory("b", 0)], 7, 7, 13)
    assert (fresh.trials, fresh.trials_saved) == (13, 0)  # the plan's shares (2 x 7) round above its budget
    assert fresh.describe() == "reused none of 2 tasks: none has measured records here yet"


def test_a_top_up_is_never_more_than_the_plan_and_the_budget_never_grows():
    plan = plan_reuse("topup", [TaskHistory("a", 3), TaskHistory("b", 0)], planned_per_task=4,
                      trials_per_batch=16, planned_trials=8)
    assert _actions(plan) == [("a", TaskAction.TOPUP, 4), ("b", TaskAction.TUNE, 4)]
    assert plan.trials == 8 and plan.trials_saved == 0
    # A global budget shared by many tasks: the one task left keeps its share.
    many = [TaskHistory(f"t{i}", 9) for i in range(18)] + [TaskHistory("new", 0)]
    plan = plan_reuse("full", many, planned_per_task=6, trials_per_batch=6, planned_trials=100)
    assert (plan.trials, plan.trials_saved, plan.skipped) == (6, 94, 18)
    assert plan.summary().to_json() == {"mode": "full", "tasks": 19, "reused": 18, "skipped": 18, "topped_up": 0,
                                        "topup_trials": 0, "planned_trials": 100, "trials": 6, "trials_saved": 94}
    assert ReuseSummary.from_json(plan.summary().to_json()) == plan.summary()


def test_bad_modes_and_plans_are_refused():
    with pytest.raises(ValueError):
        plan_reuse("sometimes", HISTORY, 32, 16, 96)
    with pytest.raises(ValueError):
        plan_reuse("auto", HISTORY, 0, 16, 96)


def test_each_task_is_judged_against_its_own_plan():
    # The trial plan gave a's convolution 40 trials and b's reshape none.
    history = [TaskHistory("a", 20), TaskHistory("b", 3), TaskHistory("c", 0)]
    plan = plan_reuse("auto", history, planned_per_task=[40, 0, 8], trials_per_batch=16, planned_trials=48)
    assert [(t.action, t.trials) for t in plan.tasks] == [(TaskAction.TOPUP, 16), (TaskAction.SKIP, 0),
                                                          (TaskAction.TUNE, 8)]
    assert plan.trials == 24 and plan.trials_saved == 24
    with pytest.raises(ValueError):
        plan_reuse("auto", history, planned_per_task=[40, 0], trials_per_batch=16, planned_trials=48)
