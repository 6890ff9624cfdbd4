"""The model's latency as its tasks' best measured schedules predict it, from the first measured task on.

The whole is each task's best time by its calls (as MetaSchedule's scheduler reckons it). Until
every task has a measured schedule, the tasks not measured yet are counted at their FLOPs run at
the measured tasks' FLOP rate (the trial plan's estimate, foundation.domain.trial_plan), and the
estimate says how many tasks it counted so: a curve of it starts at the first measured batch and
marks its estimated part, instead of starting only once the last task is measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from foundation.domain.trial_plan import TaskDemand, estimated_task_ms


@dataclass(frozen=True)
class ModelEstimate:
    """The model's estimated latency, and how many of its tasks were not measured but estimated."""

    seconds: float
    estimated_tasks: int = 0

    @property
    def measured(self) -> bool:
        """Every task counted at its measured time."""
        return self.estimated_tasks == 0

    def to_json(self) -> dict:
        return {"latency_ms": self.seconds * 1e3, "estimated_tasks": self.estimated_tasks}


def model_estimate(tasks: Sequence[TaskDemand]) -> ModelEstimate | None:
    """The estimate over ``tasks`` (``measured_ms``: a task's best time of one call); None while no
    task is measured, or no measured task has FLOPs to take a rate from."""
    unmeasured = sum(1 for t in tasks if t.measured_ms is None or t.measured_ms <= 0)
    if not tasks or unmeasured == len(tasks):
        return None
    if unmeasured == 0:
        return ModelEstimate(sum(t.measured_ms * t.weight for t in tasks) / 1e3)  # type: ignore[operator]
    per_task = estimated_task_ms(tasks)
    if per_task is None:
        return None
    return ModelEstimate(sum(per_task) / 1e3, unmeasured)
