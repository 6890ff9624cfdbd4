"""Exact-workload reuse: which of a job's tasks the registry already answers, and the budget left.

The rule is foundation.domain.reuse; this reads what it needs (each task's valid measured
records in the job's scope) through the registry's MetaSchedule database, whose structural
matching decides which stored workload a task is, and turns the plan into what the tuner takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from foundation.domain.reuse import ReuseMode, ReusePlan, TaskAction, TaskHistory, plan_reuse
from foundation.domain.trial_plan import TrialPlan
from foundation.meta_schedule.tuner import TuningBudget, trial_plan

if TYPE_CHECKING:  # pragma: no cover
    from foundation.compile import TuningTask
    from foundation.meta_schedule.database.registry_database import RegistryDatabase


@dataclass(frozen=True)
class ReusedTuning:
    """What a job tunes once reuse is decided."""

    plan: ReusePlan
    tasks: list["TuningTask"]  # the tasks to measure, in the job's order
    budget: TuningBudget  # over those tasks
    trial_caps: list[int]  # each of those tasks' trials: its plan's, or its top-up
    trial_plan: TrialPlan  # every task's trials after reuse (a skipped task's 0): what the job shows

    @property
    def tuned_plan(self) -> TrialPlan:
        """The trial plan of the tasks to measure."""
        kept = {t.name for t in self.tasks}
        return replace(self.trial_plan, tasks=tuple(line for line in self.trial_plan.tasks if line.name in kept),
                       budget=self.budget.max_trials_global)


def decide_reuse(tasks: Sequence["TuningTask"], database: "RegistryDatabase", mode: ReuseMode | str,
                 budget: TuningBudget) -> ReusedTuning:
    """Each task's action from the valid records ``database`` holds of its workload, judged
    against its trials in the job's trial plan."""
    mode = ReuseMode(mode)
    planned = trial_plan(tasks, budget, database)
    history = [TaskHistory(t.name, 0 if mode is ReuseMode.OFF else database.measured_count(t.mod)) for t in tasks]
    plan = plan_reuse(mode, history, planned.trials, budget.num_trials_per_iter, planned.total)
    kept = [(task, reuse) for task, reuse in zip(tasks, plan.tasks) if reuse.action is not TaskAction.SKIP]
    return ReusedTuning(
        plan=plan,
        tasks=[task for task, _ in kept],
        budget=TuningBudget(max(plan.trials, 1), budget.max_trials_per_task, budget.num_trials_per_iter),
        trial_caps=[reuse.trials for _, reuse in kept],
        trial_plan=TrialPlan(
            tuple(replace(line, trials=reuse.trials) for line, reuse in zip(planned.tasks, plan.tasks)),
            planned.budget, planned.per_task_cap),
    )
