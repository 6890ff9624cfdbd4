"""A job's tuning tasks split into shards of about equal cost, deterministically (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from foundation.domain.shards import Shard


@dataclass(frozen=True)
class TaskCost:
    """What splitting needs to know of a tuning task (foundation.compile.TuningTask)."""

    name: str
    weight: int
    flop: float
    planned: int | None = None  # its trials in the job's trial plan (foundation.domain.trial_plan)


# Rough cost model, in seconds per trial. Every trial pays a fixed part whatever the task
# (compiling the candidate, the RPC round trip, the search step); measuring adds the kernel's
# run time over a few repeats. MetaSchedule caps trials per task, not by weight, so a task the
# model calls twelve times costs as much to tune as one called once: weight does not enter.
# Only the ranking of tasks matters to the greedy split, so the constants need not be exact.
FIXED_SECONDS_PER_TRIAL = 0.5
MEASURED_RUNS_PER_TRIAL = 3
ASSUMED_FLOP_PER_SECOND = 50e9


def estimated_cost(task: TaskCost) -> float:
    """Estimated seconds one trial of ``task`` takes (see the constants above)."""
    return FIXED_SECONDS_PER_TRIAL + MEASURED_RUNS_PER_TRIAL * max(task.flop, 0.0) / ASSUMED_FLOP_PER_SECOND


def shard_id(job_id: str, index: int) -> str:
    return f"{job_id}.s{index}"


def job_of_shard(shard: str) -> str | None:
    """The job a `shard_id` belongs to, or None if it is not spelled like one."""
    job_id, dot_s, index = shard.rpartition(".s")
    return job_id if dot_s and job_id and index.isdigit() else None


def split_tasks(
    job_id: str,
    tasks: Sequence[TaskCost],
    matching_agents: int,
    total_trials: int,
    *,
    shards_per_agent: int = 1,
    cost: Callable[[TaskCost], float] = estimated_cost,
) -> list[Shard]:
    """Split a job's tasks into shards of about equal cost, deterministically.

    One shard per matching agent by default: tasks tuned in one MetaSchedule run share its
    task scheduler and cost model, so splitting finer than the agents can use only loses that.
    There are never more shards than tasks or trials, and never an empty shard. With no
    matching agent yet there is one shard, so whichever agent registers first can start.

    Greedy longest-first (LPT): tasks in order of falling cost go to the cheapest shard so far,
    which is within 4/3 of the best possible balance. Ties break on task name and shard index,
    so the same input always gives the same shards.

    When every task carries its planned trials (the job's trial plan), a task costs its trials
    times the cost of one, a shard's budget is the sum of its tasks' plans, and there are no more
    shards than tasks planned any trial (each shard gets one of those first: none is idle).
    Otherwise the trial budget is shared in proportion to the number of tasks (MetaSchedule's
    per-task cap), and sums to ``total_trials`` exactly.
    """
    if not tasks:
        return []
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"task names must be unique within job {job_id}")
    if total_trials < 1:
        raise ValueError(f"job {job_id} has {total_trials} trials to share; it needs at least 1")
    if shards_per_agent < 1:
        raise ValueError(f"shards_per_agent must be at least 1, got {shards_per_agent}")
    planned = all(task.planned is not None for task in tasks)
    if planned and sum(task.planned or 0 for task in tasks) > total_trials:
        raise ValueError(f"job {job_id} plans more trials than its budget of {total_trials}")
    worth_tuning = sum(1 for task in tasks if task.planned) if planned else len(tasks)
    count = min(max(worth_tuning, 1), max(matching_agents, 1) * shards_per_agent, total_trials)

    costs = {task.name: cost(task) * (task.planned if planned else 1.0) for task in tasks}
    loads = [0.0] * count
    members: list[list[str]] = [[] for _ in range(count)]
    for task in sorted(tasks, key=lambda t: (-costs[t.name], t.name)):
        index = min(range(count), key=lambda i: (loads[i], i))
        loads[index] += costs[task.name]
        members[index].append(task.name)

    position = {name: i for i, name in enumerate(names)}
    if planned:
        trials = {task.name: task.planned or 0 for task in tasks}
        budgets = [sum(trials[name] for name in m) for m in members]
    else:
        budgets = _share(total_trials, [len(m) for m in members])
    return [
        Shard(
            id=shard_id(job_id, index),
            job_id=job_id,
            # The job's own task order, so an agent tunes (and logs) in a stable order.
            task_names=tuple(sorted(members[index], key=position.__getitem__)),
            cost=loads[index],
            trial_budget=budgets[index],
        )
        for index in range(count)
    ]


def _share(total: int, parts: Sequence[int]) -> list[int]:
    """Split ``total`` in proportion to ``parts`` (largest remainder), each share at least 1.

    Needs ``total >= len(parts)``. Ties go to the lower index, so the result is deterministic.
    """
    whole = sum(parts)
    exact = [total * part / whole for part in parts]
    shares = [max(1, int(x)) for x in exact]
    indices = range(len(parts))
    while sum(shares) < total:
        shares[max(indices, key=lambda i: (exact[i] - shares[i], -i))] += 1
    # The minimum of 1 can overshoot: take back from the shares furthest above their due.
    while sum(shares) > total:
        shares[max((i for i in indices if shares[i] > 1), key=lambda i: (shares[i] - exact[i], i))] -= 1
    return shares
