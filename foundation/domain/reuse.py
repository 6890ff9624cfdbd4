"""Which of a job's tasks the registry already answers (pure: record counts in, a plan out).

A task is *reusable* when its workload already has valid measured records on the job's
fingerprint, target and TVM version (whichever model or job measured them). What the job
does with such a task depends on the mode (`farm submit --reuse`):

- ``auto`` (the default): skip it when it has at least as many valid records as this job
  would measure for it (its planned trials: it was tuned at least this hard before), else
  give it a top-up;
- ``full``: skip every reusable task;
- ``topup``: give every reusable task a top-up;
- ``off``: tune every task with its plan, as if nothing had been measured (the search still
  starts from the stored records). The default with ``--retune``, which asks to tune again.

A top-up is one measured batch (the budget's ``num_trials_per_iter``: 16, fewer when the
per-task budget is smaller), never more than the task's plan. A task with no valid record is
tuned with its plan in every mode. Trials saved are the plan's budget less what the job
will spend: the job does not hand skipped tasks' trials to the others.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class ReuseMode(str, enum.Enum):
    AUTO = "auto"
    FULL = "full"
    TOPUP = "topup"
    OFF = "off"


class TaskAction(str, enum.Enum):
    TUNE = "tune"  # its planned trials, as without reuse
    TOPUP = "topup"  # one measured batch
    SKIP = "skip"  # nothing: the build takes its best stored record


@dataclass(frozen=True)
class TaskHistory:
    """What the registry holds for one task's workload in the job's scope."""

    name: str
    measured: int  # valid measured records of its workload


@dataclass(frozen=True)
class TaskReuse:
    name: str
    action: TaskAction
    trials: int  # what the job may measure for it: its plan, its top-up, or 0
    measured: int

    def to_json(self) -> dict:
        return {"task": self.name, "action": self.action.value, "trials": self.trials, "measured": self.measured}


@dataclass(frozen=True)
class ReusePlan:
    mode: ReuseMode
    tasks: tuple[TaskReuse, ...]
    planned_trials: int  # the job's budget without reuse
    trials: int  # the job's budget with it

    @property
    def reused(self) -> int:
        """Tasks skipped or topped up."""
        return sum(t.action is not TaskAction.TUNE for t in self.tasks)

    @property
    def skipped(self) -> int:
        return sum(t.action is TaskAction.SKIP for t in self.tasks)

    @property
    def topped_up(self) -> int:
        return sum(t.action is TaskAction.TOPUP for t in self.tasks)

    @property
    def trials_saved(self) -> int:
        return self.planned_trials - self.trials

    def to_tune(self) -> list[TaskReuse]:
        """The tasks the job measures, in the job's order."""
        return [t for t in self.tasks if t.action is not TaskAction.SKIP]

    def summary(self) -> "ReuseSummary":
        """What a job keeps and shows of its reuse: counts, not the per-task list."""
        return ReuseSummary(self.mode, len(self.tasks), self.reused, self.skipped, self.topped_up,
                            sum(t.trials for t in self.tasks if t.action is TaskAction.TOPUP), self.planned_trials,
                            self.trials, self.trials_saved)

    def describe(self) -> str:
        return self.summary().describe()


@dataclass(frozen=True)
class ReuseSummary:
    """What a job keeps of its reuse (its notes' `reused`) and shows: counts, not the per-task list."""

    mode: ReuseMode
    tasks: int
    reused: int  # skipped or topped up
    skipped: int
    topped_up: int
    topup_trials: int
    planned_trials: int  # the job's budget without reuse
    trials: int  # with it
    trials_saved: int

    def to_json(self) -> dict:
        return {"mode": self.mode.value, "tasks": self.tasks, "reused": self.reused, "skipped": self.skipped,
                "topped_up": self.topped_up, "topup_trials": self.topup_trials,
                "planned_trials": self.planned_trials, "trials": self.trials, "trials_saved": self.trials_saved}

    @staticmethod
    def from_json(value: dict) -> "ReuseSummary":
        """Its `to_json`, read strictly: KeyError for a count missing, ValueError for one unknown."""
        unknown = set(value) - set(_SUMMARY_KEYS)
        if unknown:
            raise ValueError(f"reuse summary holds {', '.join(sorted(unknown))}")
        return ReuseSummary(ReuseMode(value["mode"]), *(int(value[key]) for key in _SUMMARY_KEYS[1:]))

    def describe(self) -> str:
        """One line for people:
        "reused 2 of 3 tasks (1 skipped, 1 topped up with 16 trials): 48 of 96 planned trials saved"."""
        if self.mode is ReuseMode.OFF:
            return "reuse off: every task tuned with its plan"
        if not self.reused:
            return f"reused none of {self.tasks} tasks: none has measured records here yet"
        parts = [f"{self.skipped} skipped"] if self.skipped else []
        if self.topped_up:
            parts.append(f"{self.topped_up} topped up with {self.topup_trials} trials")
        return (f"reused {self.reused} of {self.tasks} tasks ({', '.join(parts)}): "
                f"{self.trials_saved} of {self.planned_trials} planned trials saved")


_SUMMARY_KEYS = ("mode", "tasks", "reused", "skipped", "topped_up", "topup_trials", "planned_trials", "trials",
                 "trials_saved")


def describe_summary(summary: dict) -> str:
    """One line for people from a job document's `reuse` (ReuseSummary.to_json, perhaps with its tasks)."""
    return ReuseSummary.from_json({key: summary[key] for key in _SUMMARY_KEYS}).describe()


def default_mode(retune: bool) -> ReuseMode:
    """`--retune` asks to tune again, so it reuses nothing unless told to; otherwise auto."""
    return ReuseMode.OFF if retune else ReuseMode.AUTO


def plan_reuse(mode: ReuseMode | str, history: Sequence[TaskHistory], planned_per_task: int | Sequence[int],
               trials_per_batch: int, planned_trials: int) -> ReusePlan:
    """Each task's action and trials.

    ``planned_per_task`` is each task's trials without reuse (the job's trial plan,
    foundation.domain.trial_plan; one number: the same for every task), ``trials_per_batch``
    one measured batch, ``planned_trials`` the whole budget without reuse (the new budget never
    exceeds it).
    """
    mode = ReuseMode(mode)
    if isinstance(planned_per_task, int):
        if planned_per_task < 1:
            raise ValueError("a task's plan and a batch are at least one trial")
        plans = [planned_per_task] * len(history)
    else:
        plans = list(planned_per_task)
        if len(plans) != len(history) or any(p < 0 for p in plans):
            raise ValueError(f"need one plan of zero or more trials per task, got {plans} for {len(history)} tasks")
    if trials_per_batch < 1:
        raise ValueError("a task's plan and a batch are at least one trial")
    tasks = []
    for task, plan in zip(history, plans):
        action = _action(mode, task.measured, plan)
        trials = {TaskAction.TUNE: plan, TaskAction.TOPUP: min(trials_per_batch, plan), TaskAction.SKIP: 0}[action]
        tasks.append(TaskReuse(task.name, action, trials, task.measured))
    # A reused task gives back what it does not spend of its plan; what the tuned tasks
    # plan is kept even where the plan's shares round above the budget.
    given_back = sum(plan - t.trials for t, plan in zip(tasks, plans) if t.action is not TaskAction.TUNE)
    budget = min(planned_trials, max(planned_trials - given_back, sum(t.trials for t in tasks)))
    return ReusePlan(mode, tuple(tasks), planned_trials, budget)


def _action(mode: ReuseMode, measured: int, planned_per_task: int) -> TaskAction:
    if mode is ReuseMode.OFF or measured <= 0:
        return TaskAction.TUNE
    if mode is ReuseMode.FULL:
        return TaskAction.SKIP
    if mode is ReuseMode.TOPUP:
        return TaskAction.TOPUP
    return TaskAction.SKIP if measured >= planned_per_task else TaskAction.TOPUP
