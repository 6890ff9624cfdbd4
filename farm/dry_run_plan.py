"""The plan document of `farm submit --dry-run` (farm.dry_run.plan_submit), read back typed for the terminal.

Its notes are read by their own types' readers (LayoutChoice, TrialPlan, ReuseSummary), strictly: a field
missing is a KeyError, one of the wrong kind a ValueError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundation.domain.reuse import ReuseSummary, TaskAction
from foundation.domain.trial_plan import TrialPlan
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout


@dataclass(frozen=True)
class DryRunPlan:
    """What a submit would tune: the model's tasks, its budget and plan, what reuse skips, how long."""

    model: str
    batch: int
    target: str
    fingerprint: str
    registry_hit: str | None  # the artifact a submit would answer with, tuning nothing
    weights_layout: WeightsLayout
    weights_layout_choice: LayoutChoice | None
    tasks: int
    budget_trials: int
    budget_per_task: int
    trial_plan: TrialPlan | None
    reuse: ReuseSummary | None
    trials: int  # what the job would measure, reuse taken off
    trials_per_second: float | None  # this fingerprint's past jobs' rate; None without one
    estimated_seconds: float | None
    actions: Mapping[str, TaskAction] = field(default_factory=dict)  # reuse's action for each task

    def action(self, task: str) -> TaskAction:
        return self.actions.get(task, TaskAction.TUNE)

    @staticmethod
    def from_json(plan: Mapping[str, Any]) -> "DryRunPlan":
        choice, trial_plan, reuse = plan["weights_layout_choice"], plan["trial_plan"], plan["reuse"]
        rate, seconds, hit = plan["trials_per_second"], plan["estimated_seconds"], plan["registry_hit"]
        per_task = reuse.get("per_task", []) if reuse else []
        return DryRunPlan(
            model=str(plan["model"]), batch=int(plan["batch"]), target=str(plan["target"]),
            fingerprint=str(plan["fingerprint"]), registry_hit=str(hit) if hit is not None else None,
            weights_layout=WeightsLayout(plan["weights_layout"]),
            weights_layout_choice=LayoutChoice.from_json(choice) if choice else None,
            tasks=int(plan["tasks"]), budget_trials=int(plan["budget"]["trials"]),
            budget_per_task=int(plan["budget"]["per_task"]),
            trial_plan=TrialPlan.from_json(trial_plan) if trial_plan else None,
            reuse=ReuseSummary.from_json({k: v for k, v in reuse.items() if k != "per_task"}) if reuse else None,
            trials=int(plan["trials"]), trials_per_second=float(rate) if rate is not None else None,
            estimated_seconds=float(seconds) if seconds is not None else None,
            actions={str(t["task"]): TaskAction(t["action"]) for t in per_task},
        )
