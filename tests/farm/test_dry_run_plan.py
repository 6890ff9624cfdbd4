"""The plan of `farm submit --dry-run`, typed: the document `--json` prints of it, and reuse's action per task."""

from __future__ import annotations

import dataclasses
import json

from farm.dry_run_plan import DryRunPlan
from foundation.domain.reuse import ReuseMode, TaskAction, TaskHistory, plan_reuse
from foundation.domain.trial_plan import TaskDemand, plan_trials
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout

TRIAL_PLAN = plan_trials([TaskDemand("fused_dense", 2e6, 1), TaskDemand("fused_dense1", 1e6, 1),
                          TaskDemand("reshape", 0.0, 1)], 40, per_task_cap=32)
REUSE = plan_reuse(ReuseMode.AUTO, [TaskHistory("fused_dense", 64), TaskHistory("fused_dense1", 0),
                                    TaskHistory("reshape", 1)], TRIAL_PLAN.trials, 16, TRIAL_PLAN.total)
PLAN = DryRunPlan(model="mlp-tiny", batch=1, target='{"kind":"llvm"}', fingerprint="cpu-aaaa", registry_hit=None,
                  weights_layout=WeightsLayout.PLAIN,
                  weights_layout_choice=LayoutChoice(WeightsLayout.PLAIN, "asked for with --weights-layout plain"),
                  tasks=3, budget_trials=40, budget_per_task=32, trial_plan=TRIAL_PLAN, reuse=REUSE,
                  trials=REUSE.trials, trials_per_second=2.5)


def test_its_document_has_every_field_of_the_plan_as_json():
    document = PLAN.to_json()
    assert list(document) == ["registry_hit", "dry_run", "model", "batch", "target", "fingerprint", "weights_layout",
                              "weights_layout_choice", "tasks", "budget", "trial_plan", "reuse", "trials",
                              "trials_per_second", "estimated_seconds"]
    assert json.loads(json.dumps(document)) == document and document["dry_run"]
    assert document["trial_plan"] == TRIAL_PLAN.to_json() and document["trial_plan"]["per_task_cap"] == 32
    assert document["budget"] == {"trials": 40, "per_task": 32} and document["weights_layout"] == "plain"
    assert document["reuse"] == {**REUSE.summary().to_json(), "per_task": [t.to_json() for t in REUSE.tasks]}
    assert document["estimated_seconds"] == PLAN.estimated_seconds == round(REUSE.trials / 2.5, 1)


def test_each_task_has_reuses_action_and_without_reuse_or_a_rate_it_is_tuned_with_no_estimate():
    assert [PLAN.action(t.name) for t in REUSE.tasks] == [t.action for t in REUSE.tasks]
    assert any(t.action is not TaskAction.TUNE for t in REUSE.tasks) and PLAN.action("unknown") is TaskAction.TUNE
    in_rounds = dataclasses.replace(PLAN, reuse=None, trials_per_second=None)
    document = in_rounds.to_json()
    assert document["reuse"] is None and document["estimated_seconds"] is None is document["trials_per_second"]
    assert in_rounds.action("fused_dense") is TaskAction.TUNE
