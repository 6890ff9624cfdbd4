"""When a job's measurements say its tuning failed (pure: counts in, a reason out).

A few failing candidates are normal (a schedule that exceeds a limit, a build that times
out). When nearly all fail, the numbers the search kept are not worth a library, and the
usual cause is a target this device cannot run (an `mcpu` whose instructions it lacks).
A job fails when

- more than `MAX_FAILED_SHARE` of all its measured candidates failed, or
- a task that carries at least `DOMINANT_WORK_SHARE` of the model's work (its weight times
  its FLOPs) was measured and none of its candidates ran: the model's time would be that
  task's untuned code.

Tasks never measured (a budget smaller than one round) are not failures: they run untuned,
and the job says so elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from foundation.errors import shortage_in

MAX_FAILED_SHARE = 0.9
DOMINANT_WORK_SHARE = 0.5


@dataclass(frozen=True)
class TaskOutcome:
    """How one task's measurements went."""

    name: str
    weight: int
    flop: float
    trials: int  # candidates measured, failed ones included
    errors: int  # candidates that failed to build or to run
    first_error: str | None = None


def measurements_failed(tasks: Sequence[TaskOutcome]) -> str | None:
    """Why these measurements mean a failed job, or None when they do not."""
    trials = sum(t.trials for t in tasks)
    errors = sum(t.errors for t in tasks)
    if trials == 0:
        return None
    example = next((t.first_error for t in tasks if t.first_error), None)
    detail = f"; first error: {example[:300]}" if example else ""
    if errors > MAX_FAILED_SHARE * trials:
        # Run out of files, processes or disk, every candidate fails whatever the target.
        shortage = shortage_in(example) if example else None
        cause = f"this box seems to have run out of {shortage}" if shortage else "the target may not match this device"
        return (f"{errors} of {trials} measured candidates failed (more than {MAX_FAILED_SHARE:.0%}); "
                f"{cause}{detail}")
    work = sum(t.weight * t.flop for t in tasks)
    for task in tasks:
        share = task.weight * task.flop / work if work > 0 else 0.0
        if task.trials and task.errors == task.trials and share >= DOMINANT_WORK_SHARE:
            shortage = shortage_in(example) if example else None
            cause = f" (this box seems to have run out of {shortage})" if shortage else ""
            return (f"all {task.trials} measured candidates of task {task.name}, {share:.0%} of the model's "
                    f"work, failed{cause}{detail}")
    return None
