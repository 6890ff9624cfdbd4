"""Shards of a job's tuning tasks and the leases agents hold on them: pure state, no I/O.

Every function here takes values and returns new values; nothing reads a clock, a socket or
a database. Time is passed in as seconds on the caller's clock (the coordinator uses epoch
seconds, so values survive a restart).

The registry backs this with SQL later. The intended pattern there, which keeps one source of
truth for what is legal:

    old = shard_from_row(row)
    new = lease(old, agent_id, now, ttl).shard          # raises if illegal
    UPDATE shards SET state=:new.state, attempt=:new.attempt, agent_id=..., leased_at=...
     WHERE id=:old.id AND state=:old.state AND attempt=:old.attempt
    -- rowcount 0: another coordinator thread won the race; re-read and try again

and, for bulk moves, ``WHERE state IN :sources`` with ``sources = allowed_sources(new_state)``.
Choosing the next shard to lease is ``ORDER BY cost DESC, id ... FOR UPDATE SKIP LOCKED`` on
PostgreSQL, the same order `next_pending` uses.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from foundation.domain.jobs import IllegalTransition

# A shard whose attempts failed this many times fails for good (and with it, its job).
DEFAULT_MAX_ATTEMPTS = 3


class ShardState(str, enum.Enum):
    PENDING = "pending"  # waiting for an agent: new, or re-queued after a failed attempt
    LEASED = "leased"  # an agent tunes it under the current attempt id
    DONE = "done"
    FAILED = "failed"  # every allowed attempt failed
    CANCELLED = "cancelled"  # its job was cancelled, or failed because of another shard

    @property
    def is_final(self) -> bool:
        return not _TRANSITIONS[self]


_TRANSITIONS: dict[ShardState, frozenset[ShardState]] = {
    ShardState.PENDING: frozenset({ShardState.LEASED, ShardState.CANCELLED}),
    # leased -> pending is a re-queue: the attempt failed or its agent went silent.
    ShardState.LEASED: frozenset(
        {ShardState.PENDING, ShardState.DONE, ShardState.FAILED, ShardState.CANCELLED}
    ),
    ShardState.DONE: frozenset(),
    ShardState.FAILED: frozenset(),
    ShardState.CANCELLED: frozenset(),
}


class IllegalShardTransition(IllegalTransition):
    """A shard was asked to move to a state its current state cannot reach."""


class StaleAttempt(ValueError):
    """A report, completion or failure names an attempt that is no longer the current lease
    (of a shard, or of a validation: foundation.domain.validations)."""


def check_transition(current: ShardState | str, new: ShardState | str) -> ShardState:
    """Return ``new`` as a ShardState if ``current -> new`` is legal, else raise."""
    current, new = ShardState(current), ShardState(new)
    if new not in _TRANSITIONS[current]:
        raise IllegalShardTransition(f"shard cannot go from {current.value} to {new.value}")
    return new


def allowed_sources(new: ShardState | str) -> frozenset[ShardState]:
    """The states from which a shard may move to ``new``: the guard of a bulk SQL UPDATE."""
    new = ShardState(new)
    return frozenset(state for state, targets in _TRANSITIONS.items() if new in targets)


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskCost:
    """What splitting needs to know of a tuning task (foundation.compile.TuningTask)."""

    name: str
    weight: int
    flop: float
    planned: int | None = None  # its trials in the job's trial plan (foundation.domain.trial_plan)


@dataclass(frozen=True)
class AttemptFailure:
    attempt: int
    agent_id: str | None
    reason: str


@dataclass(frozen=True)
class Shard:
    """Some of a job's tasks, tuned together by one agent at a time.

    ``attempt`` counts the leases granted so far and is the current lease's attempt id while
    leased; 0 means never leased. ``agent_id`` and ``leased_at`` describe the current (or, once
    done, the last) lease.
    """

    id: str
    job_id: str
    task_names: tuple[str, ...]
    cost: float
    trial_budget: int
    state: ShardState = ShardState.PENDING
    attempt: int = 0
    agent_id: str | None = None
    leased_at: float | None = None
    failures: tuple[AttemptFailure, ...] = ()

    def moved(self, new: ShardState, **changes) -> "Shard":
        """This shard in state ``new`` with ``changes``, if the transition is legal."""
        return replace(self, state=check_transition(self.state, new), **changes)


@dataclass(frozen=True)
class Lease:
    """A grant of a shard to an agent. ``shard`` is the shard as leased (state LEASED)."""

    shard: Shard
    # When the lease lapses if its agent never heartbeats again; each heartbeat pushes the
    # real deadline to heartbeat + ttl (see `expire`).
    expires_at: float

    @property
    def attempt(self) -> int:
        return self.shard.attempt

    @property
    def agent_id(self) -> str:
        assert self.shard.agent_id is not None
        return self.shard.agent_id


# --------------------------------------------------------------------------------------------
# Splitting a job into shards
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Leases
# --------------------------------------------------------------------------------------------


def next_pending(shards: Iterable[Shard]) -> Shard | None:
    """The pending shard to lease next: the costliest first, so the long ones start early."""
    pending = [shard for shard in shards if shard.state is ShardState.PENDING]
    return min(pending, key=lambda s: (-s.cost, s.id), default=None)


def lease(shard: Shard, agent_id: str, now: float, ttl: float) -> Lease:
    """Grant a pending shard to ``agent_id`` under the next attempt id."""
    if ttl <= 0:
        raise ValueError(f"lease TTL must be positive, got {ttl}")
    leased = shard.moved(ShardState.LEASED, attempt=shard.attempt + 1, agent_id=agent_id, leased_at=now)
    return Lease(shard=leased, expires_at=now + ttl)


def stale_reason(shard: Shard, attempt: int, agent_id: str | None = None) -> str | None:
    """Why a message about ``attempt`` of ``shard`` must be dropped, or None if it is current."""
    if attempt > shard.attempt:
        return f"shard {shard.id} never had attempt {attempt} (its latest is {shard.attempt})"
    if attempt < shard.attempt:
        return f"attempt {attempt} of shard {shard.id} is stale: attempt {shard.attempt} replaced it"
    if shard.state is not ShardState.LEASED:
        return f"attempt {attempt} of shard {shard.id} is over: the shard is {shard.state.value}"
    if agent_id is not None and agent_id != shard.agent_id:
        return f"attempt {attempt} of shard {shard.id} was granted to agent {shard.agent_id}, not {agent_id}"
    return None


def accept_report(shard: Shard, attempt: int, agent_id: str | None = None) -> bool:
    """Whether records reported under ``attempt`` belong to the shard's current lease."""
    return stale_reason(shard, attempt, agent_id) is None


def complete(shard: Shard, attempt: int, agent_id: str | None = None) -> Shard:
    """The shard done, if ``attempt`` is its current lease; else raise StaleAttempt."""
    reason = stale_reason(shard, attempt, agent_id)
    if reason is not None:
        raise StaleAttempt(reason)
    return shard.moved(ShardState.DONE)


def fail_attempt(
    shard: Shard,
    attempt: int,
    reason: str,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    agent_id: str | None = None,
) -> Shard:
    """End the current lease as failed: pending again, or failed once attempts are used up.

    Every attempt's reason is kept, so a shard that fails for good says why each time.
    """
    stale = stale_reason(shard, attempt, agent_id)
    if stale is not None:
        raise StaleAttempt(stale)
    failures = shard.failures + (AttemptFailure(attempt, shard.agent_id, reason),)
    if len(failures) >= max_attempts:
        return shard.moved(ShardState.FAILED, failures=failures)
    return shard.moved(ShardState.PENDING, failures=failures, agent_id=None, leased_at=None)


def expire(
    shards: Iterable[Shard],
    agent_last_heartbeat: Mapping[str, float],
    now: float,
    ttl: float,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[Shard]:
    """Leased shards whose agent has been silent for longer than ``ttl``, re-queued.

    A lapsed lease counts as a failed attempt, so a shard that kills every agent that takes
    it ends up failed instead of circling forever. An agent absent from
    ``agent_last_heartbeat`` is silent since it took the lease.
    """
    expired = []
    for shard in shards:
        if shard.state is not ShardState.LEASED:
            continue
        assert shard.leased_at is not None
        # Taking the lease proves the agent was alive then, even if its last beat is older.
        alive_at = max(agent_last_heartbeat.get(shard.agent_id, shard.leased_at), shard.leased_at)
        silent = now - alive_at
        if silent > ttl:
            reason = f"agent {shard.agent_id} sent no heartbeat for {silent:.0f}s (lease TTL {ttl:.0f}s)"
            expired.append(fail_attempt(shard, shard.attempt, reason, max_attempts))
    return expired


def judges_silence(now: float, heard_since: float, ttl: float) -> bool:
    """Whether agents' silence may be held against them at ``now``: only once the coordinator
    has been able to hear them for a whole ``ttl`` since ``heard_since`` (its start, or its
    registry's return).

    Beats sent while the coordinator was down (restarting) or without its registry were never
    heard, so that time is not an agent's silence: the first TTL after is grace, within which a
    live agent beats again (or re-registers under its id) and keeps its lease and attempt. After
    it, `expire` judges as ever: nothing silent for a TTL since ``heard_since`` is spared.
    """
    return now - heard_since > ttl


@dataclass(frozen=True)
class HeartbeatVerdict:
    """What a heartbeat's list of running leases means for the agent that sent it."""

    # (shard id, attempt, reason): leases the agent runs that are no longer current; tell it
    # to stop them.
    cancel: tuple[tuple[str, int, str], ...]
    # Shards leased to this agent that it does not report: it lost them (e.g. it restarted
    # under the same id). Re-queue each with `fail_attempt`.
    lost: tuple[Shard, ...]
    # The agent lists exactly the leases granted to it: until a shard changes, the same list
    # means the same (empty) verdict.
    settled: bool = False


def reconcile_heartbeat(
    agent_id: str,
    running: Iterable[tuple[str, int]],
    shards: Mapping[str, Shard],
    now: float,
    grace: float,
) -> HeartbeatVerdict:
    """Compare the leases an agent says it runs with the ones the coordinator granted it.

    ``shards`` maps shard id to shard, covering at least every shard the agent reports and
    every shard leased to it. A lease granted less than ``grace`` seconds ago is not lost yet:
    the heartbeat may have left before the agent received it.
    """
    reported = set(running)
    cancel = []
    for shard_id_, attempt in sorted(reported):
        shard = shards.get(shard_id_)
        reason = f"shard {shard_id_} is unknown" if shard is None else stale_reason(shard, attempt, agent_id)
        if reason is not None:
            cancel.append((shard_id_, attempt, reason))
    lost = tuple(
        shard
        for shard in sorted(shards.values(), key=lambda s: s.id)
        if shard.state is ShardState.LEASED
        and shard.agent_id == agent_id
        and (shard.id, shard.attempt) not in reported
        and shard.leased_at is not None
        and now - shard.leased_at >= grace
    )
    granted = {
        (s.id, s.attempt)
        for s in shards.values()
        if s.state is ShardState.LEASED and s.agent_id == agent_id
    }
    return HeartbeatVerdict(
        cancel=tuple(cancel), lost=lost, settled=not cancel and granted == reported
    )


def cancel_unfinished(shards: Iterable[Shard]) -> list[Shard]:
    """Every shard not yet final, cancelled (for a cancelled job, or one failed elsewhere)."""
    return [shard.moved(ShardState.CANCELLED) for shard in shards if not shard.state.is_final]


# --------------------------------------------------------------------------------------------
# What the shards mean for their job
# --------------------------------------------------------------------------------------------


class JobOutcome(str, enum.Enum):
    TUNING = "tuning"  # some shard is pending or leased
    READY_TO_BUILD = "ready_to_build"  # every shard is done
    FAILED = "failed"  # some shard failed for good
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class JobRollup:
    outcome: JobOutcome
    counts: Mapping[ShardState, int]
    failed: tuple[Shard, ...]
    error: str | None  # for FAILED: which shards failed, and each attempt's reason

    @property
    def is_final(self) -> bool:
        return self.outcome is not JobOutcome.TUNING


def rollup(shards: Iterable[Shard]) -> JobRollup:
    """The job-level meaning of its shards' states.

    A failed shard fails the job even while others still run: the model cannot be built
    without every task tuned, so the caller cancels the rest (`cancel_unfinished`). A job with
    no tunable task is ready to build at once.
    """
    shards = sorted(shards, key=lambda s: s.id)
    counts = dict.fromkeys(ShardState, 0)
    for shard in shards:
        counts[shard.state] += 1
    failed = tuple(shard for shard in shards if shard.state is ShardState.FAILED)
    if failed:
        return JobRollup(JobOutcome.FAILED, counts, failed, _failure_message(failed, len(shards)))
    if counts[ShardState.CANCELLED]:
        outcome = JobOutcome.CANCELLED
    elif counts[ShardState.DONE] == len(shards):
        outcome = JobOutcome.READY_TO_BUILD
    else:
        outcome = JobOutcome.TUNING
    return JobRollup(outcome, counts, (), None)


def _failure_message(failed: Sequence[Shard], total: int) -> str:
    parts = []
    for shard in failed:
        attempts = "; ".join(
            f"attempt {f.attempt}" + (f" on {f.agent_id}" if f.agent_id else "") + f": {f.reason}"
            for f in shard.failures
        )
        parts.append(
            f"shard {shard.id} (tasks {', '.join(shard.task_names)}) failed after "
            f"{len(shard.failures)} attempts: {attempts}"
        )
    return f"{len(failed)} of {total} shards failed. " + " | ".join(parts)
