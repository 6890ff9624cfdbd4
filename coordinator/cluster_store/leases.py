"""Shard leases: claimed by agents, reported under, completed, failed, expired and reconciled."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from foundation.domain import shard_leases
from foundation.domain.job_spec import job_notes, noted
from foundation.domain.jobs import JobState
from foundation.domain.leases import DEFAULT_MAX_ATTEMPTS, StaleAttempt
from foundation.domain.shard_leases import HeartbeatVerdict
from foundation.domain.shards import Shard, ShardState
from foundation.domain.warm_start_use import WarmStartUse, WarmStartUsed
from foundation.errors import FarmError, NotFound, RegistryError
from foundation.registry.entities import ShardChange, ShardClaim, ShardLease, StoredShard
from foundation.registry.schema import AgentRow, JobRow, ShardRow
from foundation.registry.session import Changes, UnitOfWork, WriteSession

from .events import EventLog
from .guarded_update import update_lease, update_leases
from .locking import RowLocks, agent_mismatch
from .plans import PlanStore


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


class LeaseStore:
    """Shards leased to agents, each lease an attempt: a stale attempt changes nothing. What a
    shard's end means for its job is the plan's to settle (PlanStore.settle_job_in)."""

    def __init__(self, unit: UnitOfWork, locks: RowLocks, plans: PlanStore, events: EventLog):
        self._unit = unit
        self._locks = locks
        self._plans = plans
        self._events = events

    def leases_of_agent(self, agent_id: str) -> list[StoredShard]:
        query = (
            select(ShardRow)
            .where(ShardRow.agent_id == agent_id, ShardRow.state == ShardState.LEASED.value)
            .order_by(ShardRow.id)
        )
        with self._unit.read() as session:
            return [self._plans.stored_in(session, row) for row in session.scalars(query)]

    def pending_work(self) -> set[tuple[str, str]]:
        """(fingerprint id, target kind) of every running job with a pending shard."""
        query = (
            select(JobRow.fingerprint_id, JobRow.target_kind)
            .join(ShardRow, ShardRow.job_id == JobRow.id)
            .where(ShardRow.state == ShardState.PENDING.value, JobRow.state == JobState.RUNNING.value)
            .distinct()
        )
        with self._unit.read() as session:
            return {(fp, kind) for fp, kind in session.execute(query) if fp is not None}

    def claim_shard(
        self,
        agent_id: str,
        fingerprint_id: str,
        target_kinds: Iterable[str],
        now: datetime,
        ttl: float,
    ) -> ShardLease | None:
        """Lease the next pending shard this agent can tune, or None when there is none.

        Only shards of running jobs for the agent's fingerprint and one of its target kinds;
        oldest job first (so a big job cannot starve earlier ones), then costliest shard
        first as `foundation.domain.shard_leases.next_pending` orders them.
        """
        [answer] = self.claim_shards([ShardClaim(agent_id, fingerprint_id, tuple(target_kinds))], now, ttl)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def claim_shards(
        self, claims: Sequence[ShardClaim], now: datetime, ttl: float
    ) -> list[ShardLease | None | FarmError]:
        """`claim_shard` for many agents at once: per claim a lease, None (no work for it) or
        the error that claim alone raises (an unknown agent, a wrong fingerprint).

        Claims that want the same work share transactions, one per job they draw from (one
        job per transaction, by the lock order); a thousand agents asking at once after a
        coordinator restart cost tens of transactions, not a thousand.
        """
        answers: list[ShardLease | None | FarmError] = [None] * len(claims)
        wanting: dict[tuple[str, tuple[str, ...]], list[int]] | None = None
        groups: list[tuple[tuple[str, tuple[str, ...]], list[int], set[str]]] = []
        # Each transaction draws from one job (by the lock order); the first also looks the
        # agents up, so that the usual claim (one agent, one job) is one transaction. Each
        # changes only the leases it grants (a transaction that grants none changed nothing).
        while wanting is None or groups:
            with self._unit.write(Changes.LEASES) as session:
                if wanting is None:
                    wanting = self._claims_by_work(session, claims, answers)
                    groups = [(work, indexes, set()) for work, indexes in wanting.items()]
                    if not groups:
                        break
                (fingerprint_id, kinds), indexes, passed = groups[0]
                job = self._oldest_job_with_pending(session, fingerprint_id, kinds, passed)
                leases = []
                if job is not None:
                    leases = self._lease_from_job(session, job, [claims[i].agent_id for i in indexes], now, ttl)
            if job is None:
                groups.pop(0)  # nothing left for these claims
                continue
            if not leases:
                passed.add(job.id)  # jobs with nothing left to lease to these claims
                continue
            for lease in leases:
                index = next(i for i in indexes if claims[i].agent_id == lease.shard.agent_id)
                answers[index] = lease
                indexes.remove(index)
            if not indexes:
                groups.pop(0)
        return answers

    def _claims_by_work(
        self, session: Session, claims: Sequence[ShardClaim], answers: list
    ) -> dict[tuple[str, tuple[str, ...]], list[int]]:
        """Claim indexes by the (fingerprint, target kinds) they can tune; a claim of an unknown
        agent, or of a fingerprint other than its agent's, gets its error in ``answers``."""
        agents = {
            row.id: row
            for row in session.execute(
                select(AgentRow.id, AgentRow.fingerprint_id, AgentRow.target_kinds).where(
                    AgentRow.id.in_({c.agent_id for c in claims})
                )
            )
        }
        wanting: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        for index, claim in enumerate(claims):
            agent = agents.get(claim.agent_id)
            if agent is None:
                answers[index] = self._locks.unknown_agent(claim.agent_id)
            elif agent.fingerprint_id != claim.fingerprint_id:
                answers[index] = agent_mismatch(claim.agent_id, agent.fingerprint_id, claim.fingerprint_id)
            else:
                kinds = tuple(sorted(set(claim.target_kinds) & set(agent.target_kinds)))
                if kinds:
                    wanting.setdefault((claim.fingerprint_id, kinds), []).append(index)
        return wanting

    def _oldest_job_with_pending(
        self, session: Session, fingerprint_id: str, kinds: Sequence[str], passed: set[str]
    ) -> JobRow | None:
        """The oldest running job with a pending shard for these claims, its row locked as
        `RowLocks.lock_job` locks it, in the same statement."""
        query = (
            select(JobRow)
            .join(ShardRow, ShardRow.job_id == JobRow.id)
            .where(
                ShardRow.state == ShardState.PENDING.value,
                JobRow.state == JobState.RUNNING.value,
                JobRow.fingerprint_id == fingerprint_id,
                JobRow.target_kind.in_(kinds),
            )
            .order_by(JobRow.created_at, JobRow.id)
            .limit(1)
            .with_for_update(of=JobRow, key_share=True)
            .execution_options(populate_existing=True)
        )
        if passed:
            query = query.where(JobRow.id.not_in(passed))
        return session.scalars(query).first()

    def _lease_from_job(
        self, session: WriteSession, job: JobRow, agent_ids: Sequence[str], now: datetime, ttl: float
    ) -> list[ShardLease]:
        """Lease up to one pending shard of the job, whose row is locked, to each agent, in
        order (costliest first)."""
        if job.state != JobState.RUNNING.value:
            return []
        # The job lock already serializes the claims of one job; SKIP LOCKED keeps a claim
        # from queueing behind a shard row some other writer holds.
        rows = session.scalars(
            select(ShardRow)
            .where(ShardRow.job_id == job.id, ShardRow.state == ShardState.PENDING.value)
            .order_by(ShardRow.cost.desc(), ShardRow.id)
            .limit(len(agent_ids))
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        ).all()
        if not rows:
            return []
        # Only the leased shards' tasks: the plan of a large model holds every task's module.
        leased_tasks = self._plans.tasks_in(session, job.id, (i for row in rows for i in row.task_indexes))
        tasks = {task.index: task for task in leased_tasks}
        deadline = now + timedelta(seconds=ttl)
        changes, shards = [], []
        for row, agent_id in zip(rows, agent_ids):
            old = row.to_entity([tasks[i].name for i in row.task_indexes])
            new = shard_leases.lease(old.as_shard(), agent_id, _seconds(now), ttl).shard
            changes.append({"row_id": old.id, "old_state": old.state.value, "old_attempt": old.attempt,
                            "new_state": new.state.value, "new_attempt": new.attempt, "agent": agent_id})
            shards.append(replace(old, state=new.state, attempt=new.attempt, agent_id=agent_id, leased_at=now,
                                  heartbeat_deadline=deadline, updated_at=now))
        # One statement for all: the rows are locked, so the guard (as in `_write_shard`)
        # cannot miss; if it ever did, nothing of this claim is kept.
        updated = update_leases(session, ShardRow, changes, leased_at=now, heartbeat_deadline=deadline, updated_at=now)
        if updated != len(changes):
            raise RegistryError(f"shards of job {job.id} changed while they were being leased", "ask again")
        session.changed_leases_of(change["agent"] for change in changes)
        self._events.append_many_in(session, job.id, [("shard_changed", s.changed_event()) for s in shards], now)
        job_entity = job.to_entity()
        return [
            ShardLease(
                shard=shard,
                job=job_entity,
                tasks=[tasks[i] for i in sorted(set(shard.task_indexes))],
                expires_at=deadline,
            )
            for shard in shards
        ]

    def complete_shard(
        self, shard_id: str, attempt: int, agent_id: str, now: datetime, warm_start: WarmStartUse | None = None
    ) -> ShardChange:
        """End a lease as done. ``warm_start``, what the shard's search started from (seeds, cost
        model), is kept with the job (its notes' warm_start_used, by shard) in the same unit of
        work, under the job's lock: shards completing at once lose none of it, a stale attempt adds none."""
        # Only the completing agent's lease ends (a completion fails no job, which would end others').
        with self._unit.write(Changes.LEASES) as session:
            old = self._shard_for_change(session, shard_id)
            try:
                new = shard_leases.complete(old.as_shard(), attempt, agent_id)
            except StaleAttempt as exc:
                return ShardChange(False, str(exc), old, self._plans.rollup_in(session, old.job_id))
            if warm_start is not None:
                job = self._locks.job_row(session, old.job_id)
                used = job_notes(job).warm_start_used or WarmStartUsed()
                job.options = noted(job, warm_start_used=used.with_shard(shard_id, warm_start))
            return self._apply_change(session, old, new, now, reason=None)

    def fail_shard(
        self,
        shard_id: str,
        attempt: int,
        agent_id: str,
        reason: str,
        now: datetime,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> ShardChange:
        """End a lease as failed: the shard is pending again, or failed once its attempts are
        used up, which fails the job and cancels its other shards."""
        with self._unit.write(Changes.STATE) as session:
            old = self._shard_for_change(session, shard_id)
            try:
                new = shard_leases.fail_attempt(
                    old.as_shard(), attempt, reason, max_attempts, agent_id
                )
            except StaleAttempt as exc:
                return ShardChange(False, str(exc), old, self._plans.rollup_in(session, old.job_id))
            return self._apply_change(session, old, new, now, reason=reason)

    def expire_leases(
        self, now: datetime, ttl: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[StoredShard]:
        """Leases whose agent sent no heartbeat for ``ttl`` seconds, re-queued (or failed
        after ``max_attempts``, which fails the job). Returns the shards that changed."""
        cutoff = now - timedelta(seconds=ttl)
        query = (
            select(ShardRow, AgentRow.last_heartbeat_at)
            .outerjoin(AgentRow, AgentRow.id == ShardRow.agent_id)
            .where(
                ShardRow.state == ShardState.LEASED.value,
                ShardRow.leased_at < cutoff,
                or_(AgentRow.last_heartbeat_at.is_(None), AgentRow.last_heartbeat_at < cutoff),
            )
            .order_by(ShardRow.id)
        )
        # Almost every tick finds none: looked for first without a write unit, which SQLite
        # would give the whole database, and which would say that state may have changed.
        with self._unit.read() as session:
            if session.execute(query.with_only_columns(ShardRow.id).limit(1)).first() is None:
                return []
        with self._unit.write(Changes.STATE) as session:
            candidates = session.execute(query.with_only_columns(ShardRow.job_id)).scalars()
            for job_id in sorted(set(candidates)):
                self._locks.lock_job(session, job_id)
            locked = query.with_for_update(of=ShardRow).execution_options(populate_existing=True)
            found = session.execute(locked).all()
            olds = {row.id: self._plans.stored_in(session, row) for row, _ in found}
            heartbeats = {
                row.agent_id: _seconds(beat) for row, beat in found if row.agent_id and beat
            }
            expired = shard_leases.expire(
                [s.as_shard() for s in olds.values()], heartbeats, _seconds(now), ttl, max_attempts
            )
            changed = []
            for new in expired:
                old = olds[new.id]
                if self._write_shard(session, old, new, now, leased_at=None):
                    changed.append(self._plans.reread_in(session, new.id))
                    self._events.append_in(
                        session,
                        new.job_id,
                        "shard_changed",
                        changed[-1].changed_event(new.failures[-1].reason),
                        now,
                    )
            for job_id in sorted({s.job_id for s in changed}):
                self._plans.settle_job_in(session, job_id, now)
            return [self._plans.reread_in(session, s.id) for s in changed]

    def reconcile_leases(
        self,
        agent_id: str,
        running: Iterable[tuple[str, int]],
        now: datetime,
        grace: float,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        as_of: datetime | None = None,
    ) -> HeartbeatVerdict:
        """Compare the leases a heartbeat lists with the ones granted to its agent
        (`foundation.domain.shard_leases.reconcile_heartbeat`); leases it lost are re-queued here, the
        ones it must stop are returned for the reply. ``as_of`` is when the agent took its
        list (default ``now``): the grace for new leases counts from there."""
        running = list(running)
        # Almost every heartbeat changes nothing. Decide that from a plain read first: the
        # locking path below (job rows, then shard rows) made heartbeats the coordinator's
        # main cost at 1,000 agents (bench/coordinator_scale.py).
        verdict = self._heartbeat_verdict(agent_id, running, as_of or now, grace)
        if not verdict.lost:
            return verdict  # cancels are only instructions: nothing to write
        with self._unit.write(Changes.STATE) as session:
            ids = {shard_id for shard_id, _ in running}
            query = (
                select(ShardRow)
                .where(
                    or_(
                        ShardRow.id.in_(ids),
                        (ShardRow.agent_id == agent_id)
                        & (ShardRow.state == ShardState.LEASED.value),
                    )
                )
                .order_by(ShardRow.id)
            )
            for job_id in sorted(set(session.scalars(query.with_only_columns(ShardRow.job_id)))):
                self._locks.lock_job(session, job_id)
            query = query.with_for_update(of=ShardRow).execution_options(populate_existing=True)
            olds = {row.id: self._plans.stored_in(session, row) for row in session.scalars(query)}
            verdict = shard_leases.reconcile_heartbeat(
                agent_id,
                running,
                {shard_id: s.as_shard() for shard_id, s in olds.items()},
                _seconds(as_of or now),
                grace,
            )
            settle = set()
            for lost in verdict.lost:
                reason = f"agent {agent_id} no longer runs attempt {lost.attempt} (it restarted?)"
                new = shard_leases.fail_attempt(lost, lost.attempt, reason, max_attempts, agent_id)
                if self._write_shard(session, olds[lost.id], new, now, leased_at=None):
                    shard = self._plans.reread_in(session, lost.id)
                    self._events.append_in(
                        session, shard.job_id, "shard_changed", shard.changed_event(reason), now
                    )
                    settle.add(shard.job_id)
            for job_id in sorted(settle):
                self._plans.settle_job_in(session, job_id, now)
            return verdict

    def _heartbeat_verdict(
        self, agent_id: str, running: list[tuple[str, int]], as_of: datetime, grace: float
    ) -> HeartbeatVerdict:
        """`reconcile_heartbeat` on an unlocked read of just the columns it looks at."""
        ids = {shard_id for shard_id, _ in running}
        query = select(
            ShardRow.id, ShardRow.job_id, ShardRow.state, ShardRow.attempt, ShardRow.agent_id, ShardRow.leased_at
        ).where(
            or_(
                ShardRow.id.in_(ids),
                (ShardRow.agent_id == agent_id) & (ShardRow.state == ShardState.LEASED.value),
            )
        )
        with self._unit.read() as session:
            shards = {
                row.id: Shard(
                    row.id, row.job_id, (), 0.0, 0, ShardState(row.state), row.attempt, row.agent_id,
                    None if row.leased_at is None else _seconds(row.leased_at),
                )
                for row in session.execute(query)
            }
        return shard_leases.reconcile_heartbeat(agent_id, running, shards, _seconds(as_of), grace)

    def _shard_for_change(self, session: Session, shard_id: str) -> StoredShard:
        row = self._locks.locked_shard(session, shard_id)
        if row is None:
            raise NotFound(f"no shard {shard_id!r} in the registry at {self._locks.url}")
        return self._plans.stored_in(session, row)

    def _write_shard(
        self,
        session: WriteSession,
        old: StoredShard,
        new: Shard,
        now: datetime,
        *,
        leased_at: datetime | None = None,
        heartbeat_deadline: datetime | None = None,
    ) -> bool:
        """Write a transition decided by foundation.domain.shard_leases, guarded by the state and
        attempt it was decided from (`update_lease`); False if another writer changed the shard
        first. The agents whose leases it changes are the one that held the shard and the one
        that holds it now."""
        leased = new.state is ShardState.LEASED
        # A finished shard keeps who held its last lease and when; a re-queued one does not.
        if new.state is ShardState.PENDING:
            leased_at = None
        elif not leased:
            leased_at = old.leased_at
        if not update_lease(session, ShardRow, ShardRow.id == old.id, old, new, now, leased_at=leased_at,
                            heartbeat_deadline=heartbeat_deadline if leased else None):
            return False
        session.changed_leases_of({agent_id for agent_id in (old.agent_id, new.agent_id) if agent_id})
        return True

    def _apply_change(
        self, session: WriteSession, old: StoredShard, new: Shard, now: datetime, reason: str | None
    ) -> ShardChange:
        if not self._write_shard(session, old, new, now):
            # Unreachable while the shard row is locked; kept as the guard of last resort.
            raise RegistryError(
                f"shard {old.id} changed while it was being updated", "retry the call"
            )
        shard = self._plans.reread_in(session, old.id)
        self._events.append_in(session, shard.job_id, "shard_changed", shard.changed_event(reason), now)
        rollup = self._plans.settle_job_in(session, shard.job_id, now)
        return ShardChange(True, None, self._plans.reread_in(session, old.id), rollup)
