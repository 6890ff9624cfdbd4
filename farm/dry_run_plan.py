"""The plan of `farm submit --dry-run` (farm.dry_run.plan_submit): what a submit would tune, typed for the
terminal, and the document `--json` prints (`DryRunPlan.to_json`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from foundation.domain.reuse import ReusePlan, TaskAction
from foundation.domain.trial_plan import TrialPlan
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout


@dataclass(frozen=True)
class DryRunPlan:
    """What a submit would tune: the model's tasks, its budget and plan, what reuse skips, how long."""

    model: str
    batch: int
    target: str  # canonical target JSON
    fingerprint: str
    registry_hit: str | None  # the artifact a submit would answer with, tuning nothing
    weights_layout: WeightsLayout
    weights_layout_choice: LayoutChoice | None
    tasks: int
    budget_trials: int
    budget_per_task: int
    trial_plan: TrialPlan | None
    reuse: ReusePlan | None  # None: tuned in rounds, which decide no reuse
    trials: int  # what the job would measure, reuse taken off
    trials_per_second: float | None  # this fingerprint's past jobs' rate; None without one

    @property
    def estimated_seconds(self) -> float | None:
        return round(self.trials / self.trials_per_second, 1) if self.trials_per_second else None

    def action(self, task: str) -> TaskAction:
        """What reuse does with ``task``; tuned when reuse decided nothing of it."""
        actions = {t.name: t.action for t in self.reuse.tasks} if self.reuse else {}
        return actions.get(task, TaskAction.TUNE)

    def to_json(self) -> dict[str, Any]:
        reuse, choice, trial_plan = self.reuse, self.weights_layout_choice, self.trial_plan
        return {
            "registry_hit": self.registry_hit,
            "dry_run": True,
            "model": self.model,
            "batch": self.batch,
            "target": self.target,
            "fingerprint": self.fingerprint,
            "weights_layout": self.weights_layout.value,
            "weights_layout_choice": choice.to_json() if choice else None,
            "tasks": self.tasks,
            "budget": {"trials": self.budget_trials, "per_task": self.budget_per_task},
            "trial_plan": trial_plan.to_json() if trial_plan else None,
            "reuse": ({**reuse.summary().to_json(), "per_task": [t.to_json() for t in reuse.tasks]}
                      if reuse else None),
            "trials": self.trials,
            "trials_per_second": self.trials_per_second,
            "estimated_seconds": self.estimated_seconds,
        }
