"""A job's trials in two phases: the first by the trial plan, the second where the first found the kernels
furthest from their ceilings (pure: plans and measurements in, plans out).

At the quick start's budget a plan by FLOPs gives resnet-18's 3x3 convolutions about the same trials
(their FLOPs are about equal), and 32 a task leaves the heaviest at half of onnxruntime's kernel speed
while ~128 bring them to parity (docs/benchmarks.md, "The ceiling"); which of them lags is only known
once they are measured. So a two-phase job spends part of its budget by the plan (`first_phase`:
`FIRST_PHASE_SHARE` of each task's trials, every task measured), then re-plans the rest
(`second_phase`) by what each task loses against its ceiling: its best measured time x its calls less
its FLOPs at the box's measured peak, or at the fastest measured kernel's rate where a kernel beat that
peak (foundation.domain.trial_plan.ceiling_losses). Its per-task cap,
unless the user gave one, is `CAP_FACTOR` times the average task's trials (`phased_cap`), so a laggard
can take several times its even share.

The plan's `trials` stay the whole budget's plan by FLOPs (what a one-phase tuning of it does: the
coordinator's shards, a reuse decision); its `phases` say what the first phase tunes and what the
second re-plans. After the second phase is planned they say what each phase gave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from foundation.domain.trial_plan import MEASURED_FLOOR, TaskDemand, TrialPlan, plan_trials

FIRST_PHASE_SHARE = 0.5
CAP_FACTOR = 4


def phased_cap(budget: int, tasks: int) -> int:
    """A two-phase plan's per-task cap when the user gave none: `CAP_FACTOR` times the average task's
    trials (rounded up), within the budget."""
    if budget <= 0:
        return 0
    return min(budget, CAP_FACTOR * math.ceil(budget / max(tasks, 1)))


def first_phase(plan: TrialPlan, share: float = FIRST_PHASE_SHARE) -> TrialPlan:
    """``plan`` marked with its first phase: `share` of each task's trials, rounded up, and at least
    `MEASURED_FLOOR` (or all it has) so every task planned is measured; a minor task's few trials
    all go in it (the second phase re-plans only what the first leaves)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"a first phase's share is above 0 and at most 1, not {share}")
    first = [line.trials if line.minor else min(line.trials, max(MEASURED_FLOOR, math.ceil(line.trials * share)))
             for line in plan.tasks]
    return replace(plan, tasks=tuple(replace(line, phases=(trials,)) for line, trials in zip(plan.tasks, first)),
                   phases=(sum(first), plan.total - sum(first)))


def first_phase_trials(plan: TrialPlan) -> list[int]:
    """Each task's trials in a two-phase plan's first phase; a one-phase plan's trials."""
    return [line.phases[0] if plan.phases and line.phases else line.trials for line in plan.tasks]


def second_phase(plan: TrialPlan, tasks: Sequence[TaskDemand], spent: Sequence[int],
                 peak_gflops: float | None = None) -> TrialPlan:
    """The trials ``plan`` (a first phase's) has left after each task measured ``spent``, re-planned by
    ``tasks`` (measured times and ceilings, in the plan's order), within the plan's per-task cap counting
    what each spent. Each line's trials are then its whole plan, first phase (as measured) and second;
    its share, its share of what the tasks lose against their ceilings."""
    if len(tasks) != len(plan.tasks) or len(spent) != len(plan.tasks):
        raise ValueError(f"{len(tasks)} tasks and {len(spent)} spent counts for a plan of {len(plan.tasks)}")
    spent = [max(0, s) for s in spent]
    left = max(0, plan.total - sum(spent))
    second = plan_trials(tasks, left, plan.per_task_cap, spent)
    # A line stays minor or not as the first phase tuned it: the second's shares say what is left to gain.
    return TrialPlan(
        tasks=tuple(replace(line, trials=done + more, phases=(done, more), minor=before.minor)
                    for line, before, done, more in zip(second.tasks, plan.tasks, spent, second.trials)),
        budget=plan.budget,
        per_task_cap=plan.per_task_cap,
        phases=(sum(spent), second.total),
        peak_gflops=peak_gflops,
    )


def ceiling_ms(flop: float, weight: int, peak_gflops: float | None) -> float:
    """The least a task's calls in one inference can take at ``peak_gflops``, in ms; 0 where the peak
    is unknown."""
    if not peak_gflops or peak_gflops <= 0:
        return 0.0
    return max(flop, 0.0) * max(weight, 0) / (peak_gflops * 1e6)  # GFLOP/s = 1e6 FLOP per ms


def merged(whole: TrialPlan, tuned: TrialPlan) -> TrialPlan:
    """``whole`` (every task of the job, reused ones too) with the lines of ``tuned`` (the tasks tuned,
    as their phases went) in place of its own, and ``tuned``'s phases."""
    lines = {line.name: line for line in tuned.tasks}
    return replace(whole, tasks=tuple(lines.get(line.name, line) for line in whole.tasks), phases=tuned.phases,
                   peak_gflops=tuned.peak_gflops)
