"""Shard leases: claimed by agents, reported under, completed, failed, expired and reconciled."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from coordinator import shards as shard_rules
from coordinator.jobs import JobState
from coordinator.shards import DEFAULT_MAX_ATTEMPTS, HeartbeatVerdict, Shard, ShardState, StaleAttempt
from farm.errors import NotFound, RegistryError

from ..entities import NewRecord, RecordReport, ShardChange, ShardLease, StoredShard
from ..schema import AgentRow, JobRow, ShardRow
from ..store import _job
from .locking import _CLAIM_TRIES, _RACED
from .plans import JobPlans
from .rows import _stored_shard, _failures_json, _shard_event


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


class ShardLeases(JobPlans):
    """Shards leased to agents, each lease an attempt: a stale attempt changes nothing."""

    def leases_of_agent(self, agent_id: str) -> list[StoredShard]:
        query = (
            select(ShardRow)
            .where(ShardRow.agent_id == agent_id, ShardRow.state == ShardState.LEASED.value)
            .order_by(ShardRow.id)
        )
        with self._unit() as session:
            return [self._stored(session, row) for row in session.scalars(query)]

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
        first as `coordinator.shards.next_pending` orders them.
        """
        target_kinds = set(target_kinds)
        for _ in range(_CLAIM_TRIES):
            with self._unit(write=True) as session:
                outcome = self._claim_once(session, agent_id, fingerprint_id, target_kinds, now, ttl)
            if outcome is not _RACED:
                return outcome  # type: ignore[return-value]
        return None

    def _claim_once(
        self,
        session: Session,
        agent_id: str,
        fingerprint_id: str,
        target_kinds: set[str],
        now: datetime,
        ttl: float,
    ) -> ShardLease | None | object:
        agent = self._claiming_agent(session, agent_id, fingerprint_id)
        kinds = sorted(target_kinds & set(agent.target_kinds))
        if not kinds:
            return None
        job_id = session.scalar(
            select(JobRow.id)
            .join(ShardRow, ShardRow.job_id == JobRow.id)
            .where(
                ShardRow.state == ShardState.PENDING.value,
                JobRow.state == JobState.RUNNING.value,
                JobRow.fingerprint_id == fingerprint_id,
                JobRow.target_kind.in_(kinds),
            )
            .order_by(JobRow.created_at, JobRow.id)
            .limit(1)
        )
        if job_id is None:
            return None
        # One job per transaction: holding one job while waiting for another could deadlock.
        job = self._lock_job(session, job_id)
        if job.state != JobState.RUNNING.value:
            return _RACED
        # The job lock already serializes the claims of one job; SKIP LOCKED keeps a claim
        # from queueing behind a shard row some other writer holds.
        row = session.scalars(
            select(ShardRow)
            .where(ShardRow.job_id == job_id, ShardRow.state == ShardState.PENDING.value)
            .order_by(ShardRow.cost.desc(), ShardRow.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        ).first()
        if row is None:
            return _RACED
        claimed = self._try_lease(session, row, agent_id, now, ttl)
        return _RACED if claimed is None else claimed

    def _try_lease(
        self, session: Session, row: ShardRow, agent_id: str, now: datetime, ttl: float
    ) -> ShardLease | None:
        old = self._stored(session, row)
        granted = shard_rules.lease(old.as_shard(), agent_id, _seconds(now), ttl)
        deadline = now + timedelta(seconds=ttl)
        if not self._write_shard(
            session, old, granted.shard, now, leased_at=now, heartbeat_deadline=deadline
        ):
            return None
        shard = self._reread(session, old.id)
        self._append_event(session, shard.job_id, "shard_changed", _shard_event(shard), now)
        tasks = self._tasks(session, shard.job_id)
        wanted = set(shard.task_indexes)
        return ShardLease(
            shard=shard,
            job=_job(session.get_one(JobRow, shard.job_id)),
            tasks=[task for task in tasks if task.index in wanted],
            expires_at=deadline,
        )

    def report_records(
        self,
        shard_id: str,
        attempt: int,
        agent_id: str,
        records: Sequence[NewRecord],
        trials_done_delta: int | None = None,
    ) -> RecordReport:
        """Store measured records under a lease, if it is still the shard's current one.

        A stale attempt stores nothing. ``trials_done_delta`` defaults to the number of
        records (failed candidates are records too: errors are data).
        """
        with self._unit(write=True) as session:
            row = self._locked_shard(session, shard_id)
            if row is None:
                return RecordReport(False, f"shard {shard_id} is unknown", 0, 0)
            shard = self._stored(session, row)
            reason = shard_rules.stale_reason(shard.as_shard(), attempt, agent_id)
            if reason is not None:
                return RecordReport(False, reason, 0, 0)
            job = session.get_one(JobRow, shard.job_id)
            foreign = sorted({r.fingerprint_id for r in records} - {job.fingerprint_id})
            if foreign:
                raise RegistryError(
                    f"records for fingerprint(s) {', '.join(foreign)} were reported under a "
                    f"lease of job {job.id}, which tunes for {job.fingerprint_id}",
                    "nothing was written; report records measured on this agent's device",
                )
            records = [r if r.job_id else replace(r, job_id=shard.job_id) for r in records]
            stored = self._store.insert_records_in(session, records) if records else 0
            delta = len(records) if trials_done_delta is None else trials_done_delta
            if delta:
                # The lease is locked (PostgreSQL) or the database is (SQLite): no guard needed.
                session.execute(
                    update(ShardRow)
                    .where(ShardRow.id == shard_id)
                    .values(trials_done=ShardRow.trials_done + delta)
                )
                session.execute(
                    update(JobRow)
                    .where(JobRow.id == shard.job_id)
                    .values(trials_done=JobRow.trials_done + delta)
                )
            return RecordReport(True, None, stored, len(records) - stored)

    def complete_shard(
        self, shard_id: str, attempt: int, agent_id: str, now: datetime
    ) -> ShardChange:
        with self._unit(write=True) as session:
            old = self._shard_for_change(session, shard_id)
            try:
                new = shard_rules.complete(old.as_shard(), attempt, agent_id)
            except StaleAttempt as exc:
                return ShardChange(False, str(exc), old, self._rollup(session, old.job_id))
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
        with self._unit(write=True) as session:
            old = self._shard_for_change(session, shard_id)
            try:
                new = shard_rules.fail_attempt(
                    old.as_shard(), attempt, reason, max_attempts, agent_id
                )
            except StaleAttempt as exc:
                return ShardChange(False, str(exc), old, self._rollup(session, old.job_id))
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
        with self._unit(write=True) as session:
            candidates = session.execute(query.with_only_columns(ShardRow.job_id)).scalars()
            for job_id in sorted(set(candidates)):
                self._lock_job(session, job_id)
            locked = query.with_for_update(of=ShardRow).execution_options(populate_existing=True)
            found = session.execute(locked).all()
            olds = {row.id: self._stored(session, row) for row, _ in found}
            heartbeats = {
                row.agent_id: _seconds(beat) for row, beat in found if row.agent_id and beat
            }
            expired = shard_rules.expire(
                [s.as_shard() for s in olds.values()], heartbeats, _seconds(now), ttl, max_attempts
            )
            changed = []
            for new in expired:
                old = olds[new.id]
                if self._write_shard(session, old, new, now, leased_at=None):
                    changed.append(self._reread(session, new.id))
                    self._append_event(
                        session,
                        new.job_id,
                        "shard_changed",
                        _shard_event(changed[-1], new.failures[-1].reason),
                        now,
                    )
            for job_id in sorted({s.job_id for s in changed}):
                self._settle_job(session, job_id, now)
            return [self._reread(session, s.id) for s in changed]

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
        (`coordinator.shards.reconcile_heartbeat`); leases it lost are re-queued here, the
        ones it must stop are returned for the reply. ``as_of`` is when the agent took its
        list (default ``now``): the grace for new leases counts from there."""
        running = list(running)
        # Almost every heartbeat changes nothing. Decide that from a plain read first: the
        # locking path below (job rows, then shard rows) made heartbeats the coordinator's
        # main cost at 1,000 agents (bench/coordinator_scale.py).
        verdict = self._heartbeat_verdict(agent_id, running, as_of or now, grace)
        if not verdict.lost:
            return verdict  # cancels are only instructions: nothing to write
        with self._unit(write=True) as session:
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
                self._lock_job(session, job_id)
            query = query.with_for_update(of=ShardRow).execution_options(populate_existing=True)
            olds = {row.id: self._stored(session, row) for row in session.scalars(query)}
            verdict = shard_rules.reconcile_heartbeat(
                agent_id,
                running,
                {shard_id: s.as_shard() for shard_id, s in olds.items()},
                _seconds(as_of or now),
                grace,
            )
            settle = set()
            for lost in verdict.lost:
                reason = f"agent {agent_id} no longer runs attempt {lost.attempt} (it restarted?)"
                new = shard_rules.fail_attempt(lost, lost.attempt, reason, max_attempts, agent_id)
                if self._write_shard(session, olds[lost.id], new, now, leased_at=None):
                    shard = self._reread(session, lost.id)
                    self._append_event(
                        session, shard.job_id, "shard_changed", _shard_event(shard, reason), now
                    )
                    settle.add(shard.job_id)
            for job_id in sorted(settle):
                self._settle_job(session, job_id, now)
            return verdict

    def _heartbeat_verdict(
        self, agent_id: str, running: list[tuple[str, int]], as_of: datetime, grace: float
    ) -> HeartbeatVerdict:
        """`reconcile_heartbeat` on an unlocked read (task names do not matter to it)."""
        ids = {shard_id for shard_id, _ in running}
        with self._unit() as session:
            rows = session.scalars(
                select(ShardRow).where(
                    or_(
                        ShardRow.id.in_(ids),
                        (ShardRow.agent_id == agent_id) & (ShardRow.state == ShardState.LEASED.value),
                    )
                )
            )
            shards = {
                row.id: _stored_shard(row, [str(i) for i in row.task_indexes]).as_shard() for row in rows
            }
        return shard_rules.reconcile_heartbeat(agent_id, running, shards, _seconds(as_of), grace)

    def _shard_for_change(self, session: Session, shard_id: str) -> StoredShard:
        row = self._locked_shard(session, shard_id)
        if row is None:
            raise NotFound(f"no shard {shard_id!r} in the registry at {self.url}")
        return self._stored(session, row)

    def _write_shard(
        self,
        session: Session,
        old: StoredShard,
        new: Shard,
        now: datetime,
        *,
        leased_at: datetime | None = None,
        heartbeat_deadline: datetime | None = None,
    ) -> bool:
        """Write a transition decided by coordinator.shards, guarded by the state and attempt
        it was decided from; False if another writer changed the shard first."""
        leased = new.state is ShardState.LEASED
        # A finished shard keeps who held its last lease and when; a re-queued one does not.
        if new.state is ShardState.PENDING:
            leased_at = None
        elif not leased:
            leased_at = old.leased_at
        result = session.execute(
            update(ShardRow)
            .where(
                ShardRow.id == old.id,
                ShardRow.state == old.state.value,
                ShardRow.attempt == old.attempt,
            )
            .values(
                state=new.state.value,
                attempt=new.attempt,
                agent_id=new.agent_id,
                leased_at=leased_at,
                heartbeat_deadline=heartbeat_deadline if leased else None,
                failures=_failures_json(old.failures, new, now),
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1  # type: ignore[attr-defined]

    def _apply_change(
        self, session: Session, old: StoredShard, new: Shard, now: datetime, reason: str | None
    ) -> ShardChange:
        if not self._write_shard(session, old, new, now):
            # Unreachable while the shard row is locked; kept as the guard of last resort.
            raise RegistryError(
                f"shard {old.id} changed while it was being updated", "retry the call"
            )
        shard = self._reread(session, old.id)
        self._append_event(session, shard.job_id, "shard_changed", _shard_event(shard, reason), now)
        rollup = self._settle_job(session, shard.job_id, now)
        return ShardChange(True, None, self._reread(session, old.id), rollup)
