"""The leases agents hold on shards: granted, reported under, completed, failed, expired, and
checked against what an agent's heartbeat says it runs (pure state, no I/O).

The rules a shard's lease shares with a validation's (attempts, staleness, expiry) are
foundation.domain.leases'; what is a shard's own is here: which shard goes next, a lease's
deadline, its words, and the heartbeat's verdict. Time is passed in as seconds on the caller's
clock (the coordinator uses epoch seconds, so values survive a restart).

The registry applies these decisions with an UPDATE guarded by the state and attempt they were
made from (coordinator.cluster_store.guarded_update):

    old = shard_from_row(row)
    new = lease(old, agent_id, now, ttl).shard          # raises if illegal
    UPDATE shards SET state=:new.state, attempt=:new.attempt, agent_id=..., leased_at=...
     WHERE id=:old.id AND state=:old.state AND attempt=:old.attempt
    -- rowcount 0: another coordinator thread won the race; re-read and try again

and, for bulk moves, ``WHERE state IN :sources`` with ``sources = allowed_sources(new_state)``
(foundation.domain.shards). Choosing the next shard to lease is ``ORDER BY cost DESC, id ...
FOR UPDATE SKIP LOCKED`` on PostgreSQL, the same order `next_pending` uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from foundation.domain.leases import DEFAULT_MAX_ATTEMPTS, LeaseRules
from foundation.domain.shards import Shard, ShardState


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




def next_pending(shards: Iterable[Shard]) -> Shard | None:
    """The pending shard to lease next: the costliest first, so the long ones start early."""
    pending = [shard for shard in shards if shard.state is ShardState.PENDING]
    return min(pending, key=lambda s: (-s.cost, s.id), default=None)


def lease(shard: Shard, agent_id: str, now: float, ttl: float) -> Lease:
    """Grant a pending shard to ``agent_id`` under the next attempt id."""
    if ttl <= 0:
        raise ValueError(f"lease TTL must be positive, got {ttl}")
    return Lease(shard=SHARD_LEASES.grant(shard, agent_id, now), expires_at=now + ttl)


def trials_left(budget: int, done: int, planned: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """What a lease of a shard may measure: its budget less the ``done`` trials reported under
    earlier attempts (at least 1, so that the lease runs and completes), and each task's
    ``planned`` trials (0: none planned of its own) cut in proportion to fit in it (each
    keeps at least 1).

    A re-queued shard was sent its whole budget again: a lost agent's reported trials were
    measured twice (80 of 64).
    """
    left = max(1, budget - max(0, done))
    capped = sum(planned)
    if capped <= left:
        return left, tuple(planned)
    return left, tuple(max(1, trials * left // capped) if trials else 0 for trials in planned)


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


def _silence_reason(shard: Shard, silent: float, ttl: float) -> str:
    return f"agent {shard.agent_id} sent no heartbeat for {silent:.0f}s (lease TTL {ttl:.0f}s)"


SHARD_LEASES: LeaseRules[Shard] = LeaseRules(
    pending=ShardState.PENDING, leased=ShardState.LEASED, done=ShardState.DONE, failed=ShardState.FAILED,
    stale_reason=stale_reason, silence_reason=_silence_reason)


def accept_report(shard: Shard, attempt: int, agent_id: str | None = None) -> bool:
    """Whether records reported under ``attempt`` belong to the shard's current lease."""
    return stale_reason(shard, attempt, agent_id) is None


def complete(shard: Shard, attempt: int, agent_id: str | None = None) -> Shard:
    """The shard done, if ``attempt`` is its current lease; else raise StaleAttempt."""
    return SHARD_LEASES.finish(shard, attempt, agent_id)


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
    return SHARD_LEASES.fail_attempt(shard, attempt, reason, max_attempts, agent_id)


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
    return SHARD_LEASES.expire(shards, agent_last_heartbeat, now, ttl, max_attempts)


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
