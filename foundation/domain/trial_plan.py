"""How a job's trial budget is split over its tuning tasks (pure: tasks and a budget in, trials per task out).

MetaSchedule left to itself gives every task one batch, in task order, before any task a
second: a budget smaller than one round went to `reshape` and `transpose` while the largest
convolution got none. The plan gives trials where the model's latency is instead:

- Each task's share of the model's latency is estimated from its work (FLOPs x the calls
  per inference, its weight). Once tasks have been measured (records in the registry, an
  earlier round), their measured time x weight replaces the estimate, and tasks not yet
  measured are estimated at the measured tasks' FLOP rate, so both kinds compare.
- Where each task's ceiling is known (the least its work can take on the box: its FLOPs at the
  fingerprint's measured peak) and its time measured, its share is what it loses against that
  ceiling: its time less its ceiling (a two-phase job's second phase, foundation.domain.trial_phases).
  A kernel measured faster than that peak shows the probe read low (NumPy's BLAS reached 224-251
  GFLOP/s on an Ice Lake Xeon whose tuned convolutions reached 319): the ceilings are then taken at
  the fastest measured kernel's rate instead (`reached_ceilings`), so no task's loss reads as none
  merely because the probe was slow.
- Once the model itself has been timed kernel by kernel (after a round of `farm submit --until`,
  foundation.job_driver.in_model_times), a task's share is what it loses *in the model*: its time
  there less its ceiling (the least its work can take on the box). A kernel timed fast alone but
  slow in the model gets the trials; one already near its ceiling gets few.
- A task with almost none of the latency (pools, reshapes, small elementwise tasks: less than
  `MINOR_SHARE` of the model and less than a quarter of an even share) has nothing to gain from
  tuning: it gets at most `MINOR_TRIALS`, and, unless the budget covers every task's cap, all
  such tasks together at most `MINOR_BUDGET_SHARE` of the budget.
- Every other task gets `MEASURED_FLOOR` trials first when the budget allows (so each is
  measured at all: an untuned CPU kernel is a naive loop nest), then the rest of the budget in
  proportion to its share, within the per-task cap; what a capped task cannot take goes to
  the others.

The plan never exceeds the budget (it may leave some unspent when every task is capped), and
the same input always gives the same plan (ties go to the earlier task).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MINOR_SHARE = 0.01
MINOR_TRIALS = 8
MINOR_BUDGET_SHARE = 0.1
MEASURED_FLOOR = 4


@dataclass(frozen=True)
class TaskDemand:
    """What the plan knows of one task: its work, and its best measured time if any."""

    name: str
    flop: float  # per call
    weight: int  # calls per inference
    measured_ms: float | None = None  # best measured time of one call
    in_model_ms: float | None = None  # its calls' time in one inference of the built model
    ceiling_ms: float = 0.0  # the least its calls in one inference can take on the box


@dataclass(frozen=True)
class PlannedTrials:
    """One task's line of the plan."""

    name: str
    trials: int
    share: float  # estimated share of the model's latency, 0..1
    minor: bool  # nothing worth tuning: capped at MINOR_TRIALS
    measured: bool  # the share comes from a measured time, not from FLOPs
    in_model_ms: float | None = None  # the share is of what the model loses: its time in the model
    loss_ms: float | None = None  # ... (or its measured time x calls) less its ceiling
    phases: tuple[int, ...] = ()  # its trials in each phase planned so far (foundation.domain.trial_phases)

    def to_json(self) -> dict[str, Any]:
        line: dict[str, Any] = {"task": self.name, "trials": self.trials, "share": round(self.share, 6),
                                "minor": self.minor, "measured": self.measured}
        if self.in_model_ms is not None:
            line.update(in_model_ms=round(self.in_model_ms, 6), loss_ms=round(self.loss_ms or 0.0, 6))
        elif self.loss_ms is not None:
            line.update(loss_ms=round(self.loss_ms, 6))
        if self.phases:
            line.update(phases=list(self.phases))
        return line


@dataclass(frozen=True)
class TrialPlan:
    """Trials per task, in the tasks' order."""

    tasks: tuple[PlannedTrials, ...]
    budget: int
    per_task_cap: int
    # A two-phase plan's trials in each phase (foundation.domain.trial_phases): planned, before the
    # first phase (its trials, then what the second re-plans); measured and planned, after it.
    phases: tuple[int, ...] = ()
    peak_gflops: float | None = None  # the box's peak the second phase's ceilings are taken at

    @property
    def total(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def trials(self) -> list[int]:
        return [t.trials for t in self.tasks]

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"budget": self.budget, "per_task_cap": self.per_task_cap, "planned": self.total,
                                    "tasks": [t.to_json() for t in self.tasks]}
        if self.phases:
            document["phases"] = list(self.phases)
        if self.peak_gflops is not None:
            document["peak_gflops"] = self.peak_gflops
        return document

    @staticmethod
    def from_json(document: dict[str, Any]) -> "TrialPlan":
        return TrialPlan(
            tasks=tuple(PlannedTrials(t["task"], int(t["trials"]), float(t["share"]), bool(t["minor"]),
                                      bool(t.get("measured", False)), t.get("in_model_ms"), t.get("loss_ms"),
                                      tuple(int(p) for p in t.get("phases", ())))
                        for t in document["tasks"]),
            budget=int(document["budget"]),
            per_task_cap=int(document["per_task_cap"]),
            phases=tuple(int(p) for p in document.get("phases", ())),
            peak_gflops=document.get("peak_gflops"),
        )


def latency_shares(tasks: Sequence[TaskDemand]) -> list[float]:
    """Each task's estimated share of the model's latency, or of what it loses in the model or against
    its ceiling (see the module's docstring); they sum to 1."""
    cost = in_model_losses(tasks)
    if cost is None:
        cost = ceiling_losses(tasks)
    if cost is None:
        cost = estimated_task_ms(tasks)
    if cost is None:
        cost = [max(t.flop, 0.0) * max(t.weight, 0) for t in tasks]
    total = sum(cost)
    if total <= 0:
        return [1.0 / len(tasks)] * len(tasks) if tasks else []
    return [c / total for c in cost]


def in_model_losses(tasks: Sequence[TaskDemand]) -> list[float] | None:
    """What each task loses in the model, in ms an inference: its time there (or, for a task not
    seen there, its estimate from records) less its ceiling, never below 0. None while no task was
    timed in the model."""
    if not any(_in_model(t) for t in tasks):
        return None
    alone = estimated_task_ms(tasks)
    losses = []
    for i, (task, ceiling) in enumerate(zip(tasks, reached_ceilings(tasks))):
        spent = task.in_model_ms if _in_model(task) else alone[i] if alone is not None else 0.0
        losses.append(max(0.0, spent - ceiling))  # type: ignore[operator]
    return losses


def ceiling_losses(tasks: Sequence[TaskDemand]) -> list[float] | None:
    """What each task loses against its ceiling, in ms an inference: its time (measured, or estimated
    at the measured tasks' FLOP rate) less its ceiling (`reached_ceilings`), never below 0. None where
    no ceiling is known, no task is measured, or no task loses anything: the times themselves then
    decide."""
    if not any(t.ceiling_ms > 0 for t in tasks):
        return None
    times = estimated_task_ms(tasks)
    if times is None:
        return None
    losses = [max(0.0, ms - ceiling) for ms, ceiling in zip(times, reached_ceilings(tasks))]
    return losses if sum(losses) > 0 else None


def reached_ceilings(tasks: Sequence[TaskDemand]) -> list[float]:
    """Each task's ceiling (ms an inference, 0 where unknown), no tighter than the box has shown it
    can go: where a kernel was measured (alone or in the model) at a higher FLOP rate than the peak
    the ceilings were taken at, every ceiling is taken at that kernel's rate instead."""
    ceilings = [max(t.ceiling_ms, 0.0) for t in tasks]
    # FLOP per ms an inference: the rate the ceilings were taken at, and the best any kernel reached.
    peak = max((t.flop * t.weight / c for t, c in zip(tasks, ceilings) if c > 0 and t.flop > 0), default=0.0)
    reached = 0.0
    for task in tasks:
        work = task.flop * task.weight
        if work <= 0:
            continue
        if _is_measured(task):
            reached = max(reached, work / (task.measured_ms * task.weight))  # type: ignore[operator]
        if _in_model(task) and task.in_model_ms > 0:  # type: ignore[operator]
            reached = max(reached, work / task.in_model_ms)  # type: ignore[operator]
    return [c * peak / reached for c in ceilings] if peak > 0 and reached > peak else ceilings


def estimated_task_ms(tasks: Sequence[TaskDemand]) -> list[float] | None:
    """Each task's time in one inference, in ms (a call's time by its calls): measured where it
    was, else its FLOPs at the measured tasks' FLOP rate, so both kinds compare. None while no
    measured task gives a rate (none measured, or only tasks without FLOPs)."""
    work = [max(t.flop, 0.0) * max(t.weight, 0) for t in tasks]
    measured = [i for i, t in enumerate(tasks) if _is_measured(t)]
    measured_work = sum(work[i] for i in measured)
    measured_ms = sum(tasks[i].measured_ms * max(tasks[i].weight, 0) for i in measured)  # type: ignore[operator]
    if not measured or measured_work <= 0 or measured_ms <= 0:
        return None
    flop_per_ms = measured_work / measured_ms
    return [tasks[i].measured_ms * max(tasks[i].weight, 0) if i in measured  # type: ignore[operator]
            else work[i] / flop_per_ms for i in range(len(tasks))]


def plan_trials(tasks: Sequence[TaskDemand], budget: int, per_task_cap: int | None = None,
                spent: Sequence[int] | None = None) -> TrialPlan:
    """Split ``budget`` trials over ``tasks``, at most ``per_task_cap`` each (default: no cap but the budget).

    ``spent``: trials each task already had in this job (earlier rounds of `farm submit --until`);
    the cap, `MINOR_TRIALS` and `MEASURED_FLOOR` count them.
    """
    if budget < 0:
        raise ValueError(f"a trial budget cannot be negative, got {budget}")
    n = len(tasks)
    spent = [0] * n if spent is None else [max(0, s) for s in spent]
    if len(spent) != n:
        raise ValueError(f"{len(spent)} spent counts for {n} tasks")
    cap = budget if per_task_cap is None else max(0, min(per_task_cap, budget + max(spent, default=0)))
    room = [max(0, min(budget, cap - s if per_task_cap is not None else budget)) for s in spent]
    shares = latency_shares(tasks)
    threshold = min(MINOR_SHARE, 0.25 / n) if n else 0.0
    minor = [share < threshold for share in shares]
    trials = [0] * n
    minors = [i for i in range(n) if minor[i]]
    majors = [i for i in range(n) if not minor[i]]
    if minors:
        # A budget that covers every task's cap (`--trials-per-task` alone) rations nothing.
        ample = sum(room) <= budget
        each = MINOR_TRIALS if ample else int(budget * MINOR_BUDGET_SHARE) // len(minors)
        for i in minors:
            trials[i] = max(0, min(MINOR_TRIALS - spent[i], room[i], each))
    left = budget - sum(trials)
    if majors:
        share_of_floor = left // len(majors)
        for i in majors:
            trials[i] = max(0, min(MEASURED_FLOOR - spent[i], room[i], share_of_floor))
        left -= sum(trials[i] for i in majors)
        extra = _proportional(left, [shares[i] for i in majors], [room[i] - trials[i] for i in majors])
        for i, more in zip(majors, extra):
            trials[i] += more
    measured = [_is_measured(t) for t in tasks]
    losses = in_model_losses(tasks)
    against_ceiling = ceiling_losses(tasks) if losses is None else None
    return TrialPlan(
        tasks=tuple(PlannedTrials(t.name, trials[i], shares[i], minor[i], measured[i],
                                  t.in_model_ms if losses is not None and _in_model(t) else None,
                                  losses[i] if losses is not None and _in_model(t) else
                                  against_ceiling[i] if against_ceiling is not None else None)
                    for i, t in enumerate(tasks)),
        budget=budget,
        per_task_cap=cap,
    )


def _in_model(task: TaskDemand) -> bool:
    return task.in_model_ms is not None and task.in_model_ms >= 0


def _is_measured(task: TaskDemand) -> bool:
    return task.measured_ms is not None and task.measured_ms > 0 and task.weight > 0


def _proportional(total: int, weights: Sequence[float], rooms: Sequence[int]) -> list[int]:
    """Up to ``total`` units in proportion to ``weights``, none above its room (water-filling,
    then largest remainder; ties to the lower index). Less than ``total`` only when every room is full."""
    given = [0] * len(weights)
    active = [i for i in range(len(weights)) if rooms[i] > 0]
    left = total
    while left > 0 and active:
        weight_sum = sum(weights[i] for i in active)
        exact = {i: left * (weights[i] / weight_sum if weight_sum > 0 else 1.0 / len(active)) for i in active}
        full = [i for i in active if exact[i] >= rooms[i] - given[i]]
        if full:
            for i in full:
                left -= rooms[i] - given[i]
                given[i] = rooms[i]
            active = [i for i in active if i not in full]
            continue
        # No task reaches its room: each takes the whole part of its due, and the units left go
        # to the largest remainders (a remainder's task has at least one unit of room left).
        whole = {i: int(exact[i]) for i in active}
        for i in active:
            given[i] += whole[i]
        left -= sum(whole.values())
        for i in sorted(active, key=lambda i: (whole[i] - exact[i], i))[:left]:
            given[i] += 1
        left = 0
    return given
