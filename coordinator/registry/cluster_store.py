"""ClusterStore: the distributed mode's registry writes (agents, plans, leases, events), one transaction each.

State changes of shards are decided by coordinator.shards and of jobs by coordinator.jobs;
this module only reads rows into those values and writes the result back with an UPDATE
guarded by the state (and attempt) it read, so two coordinators never both apply a change.

Lock order, so PostgreSQL transactions wait for each other instead of deadlocking: job rows
first (by id; most units of work touch one job), then its shard or validation rows (by id).
Every event insert holds its job row, which makes a job's events commit in sequence order
(see `_append_event`), and is why the job comes first: cancelling or failing a job locks its
shards while holding it.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, undefer

from coordinator import shards as shard_rules
from coordinator.jobs import JobState, check_transition
from coordinator.shards import (
    DEFAULT_MAX_ATTEMPTS,
    HeartbeatVerdict,
    JobOutcome,
    JobRollup,
    Shard,
    ShardState,
    StaleAttempt,
    allowed_sources,
)
from farm.errors import FarmError, NotFound, RegistryError

from .entities import (
    Agent,
    Job,
    JobEvent,
    JobTask,
    NewRecord,
    PlannedTask,
    RecordReport,
    ShardChange,
    ShardFailure,
    ShardLease,
    StoredShard,
    Validation,
    ValidationChange,
    ValidationLease,
)
from .schema import (
    AgentRow,
    JobEventRow,
    JobRow,
    JobTaskRow,
    ShardRow,
    ValidationRow,
)
from .store import RegistryStore, _job

__all__ = ["AgentMismatch", "ClusterStore", "UnknownAgent"]

AGENT_ACTIVE = "active"
AGENT_LOST = "lost"

# Validation leases: pending -> leased -> done, leased -> pending (retry) or failed.
VALIDATION_PENDING = "pending"
VALIDATION_LEASED = "leased"
VALIDATION_DONE = "done"
VALIDATION_FAILED = "failed"
VALIDATION_CANCELLED = "cancelled"

# A claim that finds its candidate taken (another coordinator won) tries again this often
# before answering "no work now"; the agent asks again later anyway.
_CLAIM_TRIES = 4
_RACED = object()


class UnknownAgent(NotFound):
    """An agent id the coordinator does not know: the agent must register again."""


class AgentMismatch(FarmError):
    """An agent asked for work with a fingerprint other than the one it registered."""


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


def _shard_event(shard: StoredShard, reason: str | None = None) -> dict[str, Any]:
    return {
        "shard_id": shard.id,
        "state": shard.state.value,
        "attempt": shard.attempt,
        "agent_id": shard.agent_id or "",
        "reason": reason or "",
    }


class ClusterStore:
    """Agents, job plans, shard leases, job events and validations, over a RegistryStore."""

    def __init__(self, store: RegistryStore):
        self._store = store
        self._unit = store.unit_of_work
        self._postgres = store.dialect == "postgresql"
        self.url = store.url

    def __repr__(self) -> str:
        return f"ClusterStore({self.url!r})"

    # -- agents ----------------------------------------------------------------------------

    def register_agent(
        self,
        *,
        fingerprint_id: str,
        target_kinds: Sequence[str],
        hostname: str,
        address: str,
        tvm_version: str,
        rpc_key: str,
        details: dict[str, Any],
        now: datetime,
        previous_agent_id: str | None = None,
    ) -> Agent:
        """Register an agent; with a ``previous_agent_id`` still known, that id comes back
        active, so the leases it holds stay valid across a coordinator restart."""
        fields = {
            "fingerprint_id": fingerprint_id,
            "target_kinds": sorted(set(target_kinds)),
            "hostname": hostname,
            "address": address,
            "tvm_version": tvm_version,
            "rpc_key": rpc_key,
            "details": details,
            "state": AGENT_ACTIVE,
            "registered_at": now,
            "last_heartbeat_at": now,
        }
        with self._unit(write=True) as session:
            if previous_agent_id:
                result = session.execute(
                    update(AgentRow).where(AgentRow.id == previous_agent_id).values(**fields)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    return _agent(session.get_one(AgentRow, previous_agent_id))
            row = AgentRow(id="agent-" + secrets.token_hex(6), **fields)
            session.add(row)
            session.flush()
            return _agent(row)

    def heartbeat(self, agent_id: str, now: datetime) -> Agent | None:
        """Note that the agent is alive; None when the id is unknown (it must re-register).

        A lost agent that beats again is active again: its old leases were re-queued, and
        `reconcile_leases` tells it to drop them.
        """
        with self._unit(write=True) as session:
            result = session.execute(
                update(AgentRow)
                .where(AgentRow.id == agent_id)
                .values(last_heartbeat_at=now, state=AGENT_ACTIVE)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                return None
            return _agent(session.get_one(AgentRow, agent_id))

    def mark_lost_agents(self, now: datetime, ttl: float) -> list[Agent]:
        """Active agents silent for longer than ``ttl``, now lost (their leases expire apart)."""
        cutoff = now - timedelta(seconds=ttl)
        with self._unit(write=True) as session:
            ids = session.scalars(
                select(AgentRow.id)
                .where(AgentRow.state == AGENT_ACTIVE, AgentRow.last_heartbeat_at < cutoff)
                .order_by(AgentRow.id)
            ).all()
            lost = []
            for agent_id in ids:
                # Guarded: a heartbeat that landed meanwhile keeps the agent active.
                result = session.execute(
                    update(AgentRow)
                    .where(
                        AgentRow.id == agent_id,
                        AgentRow.state == AGENT_ACTIVE,
                        AgentRow.last_heartbeat_at < cutoff,
                    )
                    .values(state=AGENT_LOST)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    lost.append(_agent(session.get_one(AgentRow, agent_id, populate_existing=True)))
            return lost

    def get_agent(self, agent_id: str) -> Agent | None:
        with self._unit() as session:
            row = session.get(AgentRow, agent_id)
            return _agent(row) if row else None

    def list_agents(self, target_kind: str | None = None, include_lost: bool = True) -> list[Agent]:
        query = select(AgentRow).order_by(AgentRow.registered_at, AgentRow.id)
        if not include_lost:
            query = query.where(AgentRow.state == AGENT_ACTIVE)
        with self._unit() as session:
            agents = [_agent(row) for row in session.scalars(query)]
        # JSON containment is spelled differently per dialect; agents are few.
        return [a for a in agents if target_kind is None or target_kind in a.target_kinds]

    def agents_matching(self, target_kind: str) -> dict[str, int]:
        """Fingerprints with active agents of ``target_kind``, and how many agents each has."""
        counts: dict[str, int] = {}
        for agent in self.list_agents(target_kind, include_lost=False):
            counts[agent.fingerprint_id] = counts.get(agent.fingerprint_id, 0) + 1
        return dict(sorted(counts.items()))

    # -- jobs ------------------------------------------------------------------------------

    def create_job(
        self,
        *,
        model_id: str,
        target_request: str,
        target_kind: str,
        target: str,
        fingerprint_id: str | None,
        trials_budget: int,
        options: dict[str, Any],
        now: datetime,
        status: str = "",
        parent_request: str | None = None,
    ) -> Job:
        """A queued job and its first event. ``fingerprint_id`` None: it waits for an agent of
        ``target_kind`` (`bind_job_fingerprint`); ``target`` may then be empty until bound."""
        row = JobRow(
            id="job-" + secrets.token_hex(5),
            model_id=model_id,
            target=target,
            fingerprint_id=fingerprint_id,
            target_kind=target_kind,
            target_request=target_request,
            status=status,
            parent_request=parent_request,
            state=JobState.QUEUED.value,
            cache_hit=False,
            trials_budget=trials_budget,
            trials_done=0,
            options=options,
            created_at=now,
        )
        with self._unit(write=True) as session:
            session.add(row)
            session.flush()
            self._append_event(
                session, row.id, "state_changed", {"from": "", "to": row.state, "status": status}, now
            )
            return _job(row)

    def attachable_job(self, model_id: str, target: str, fingerprint_id: str | None) -> Job | None:
        """The oldest unfinished job tuning the same model for the same target and fingerprint.

        With ``fingerprint_id`` None, a job still waiting for its fingerprint whose target was
        requested as ``target`` (unbound jobs have no canonical target yet).
        """
        unfinished = [s.value for s in JobState if not s.is_final]
        query = select(JobRow).where(JobRow.model_id == model_id, JobRow.state.in_(unfinished))
        if fingerprint_id is None:
            query = query.where(JobRow.fingerprint_id.is_(None), JobRow.target_request == target)
        else:
            query = query.where(JobRow.fingerprint_id == fingerprint_id, JobRow.target == target)
        with self._unit() as session:
            row = session.scalars(query.order_by(JobRow.created_at, JobRow.id).limit(1)).first()
            return _job(row) if row else None

    def queued_jobs_without_fingerprint(self, target_kind: str) -> list[Job]:
        query = (
            select(JobRow)
            .where(
                JobRow.state == JobState.QUEUED.value,
                JobRow.fingerprint_id.is_(None),
                JobRow.target_kind == target_kind,
            )
            .order_by(JobRow.created_at, JobRow.id)
        )
        with self._unit() as session:
            return [_job(row) for row in session.scalars(query)]

    def bind_job_fingerprint(
        self, job_id: str, fingerprint_id: str, target: str, now: datetime, status: str = ""
    ) -> Job | None:
        """Give a waiting job its fingerprint and canonical target; None if another
        coordinator bound it first (or it left `queued`)."""
        with self._unit(write=True) as session:
            result = session.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.fingerprint_id.is_(None),
                    JobRow.state == JobState.QUEUED.value,
                )
                .values(fingerprint_id=fingerprint_id, target=target, status=status)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                return None
            self._append_event(
                session,
                job_id,
                "log",
                {
                    "source": "coordinator",
                    "level": "info",
                    "message": f"bound to fingerprint {fingerprint_id}",
                },
                now,
            )
            return _job(session.get_one(JobRow, job_id, populate_existing=True))

    def add_job_plan(
        self,
        job_id: str,
        tasks: Sequence[PlannedTask],
        shards: Sequence[Shard],
        now: datetime,
    ) -> list[StoredShard]:
        """Store a queued job's tasks and its shards (`coordinator.shards.split_tasks`) and
        start it (queued -> running), all at once: agents never see half a plan."""
        position = {task.name: index for index, task in enumerate(tasks)}
        if len(position) != len(tasks):
            raise ValueError(f"task names must be unique within job {job_id}")
        planned = sorted(name for shard in shards for name in shard.task_names)
        if planned != sorted(position):
            raise ValueError(f"the shards of job {job_id} must cover each of its tasks once")
        for shard in shards:
            if shard.job_id != job_id or shard.state is not ShardState.PENDING or shard.attempt:
                raise ValueError(f"shard {shard.id} is not a new shard of job {job_id}")
        with self._unit(write=True) as session:
            job = self._lock_job(session, job_id)
            if job.fingerprint_id is None:
                raise RegistryError(
                    f"job {job_id} has no fingerprint yet; it cannot be planned",
                    "bind it to a fingerprint first (bind_job_fingerprint)",
                )
            for index, task in enumerate(tasks):
                session.add(
                    JobTaskRow(
                        job_id=job_id,
                        index=index,
                        name=task.name,
                        weight=task.weight,
                        flop=task.flop,
                        workload_shash=task.workload_shash,
                        mod_json=task.mod_json,
                        workload_id=self._store.commit_workload_in(
                            session, task.workload_shash, task.mod_json
                        ),
                        trials_budget=task.trials_budget,
                    )
                )
            for index, shard in enumerate(shards):
                session.add(
                    ShardRow(
                        id=shard.id,
                        job_id=job_id,
                        index=index,
                        state=ShardState.PENDING.value,
                        attempt=0,
                        task_indexes=[position[name] for name in shard.task_names],
                        cost=shard.cost,
                        trials_budget=shard.trial_budget,
                        trials_done=0,
                        failures=[],
                        updated_at=now,
                    )
                )
            session.flush()
            self._move_job(
                session, job, JobState.RUNNING, now, status=_tuning_status(0, len(shards))
            )
            return self._shards(session, job_id)

    def cancel_job(self, job_id: str, now: datetime, reason: str = "cancelled by user") -> Job:
        """Cancel a job and its unfinished shards and validation; a finished job is returned
        as it is. Agents learn of their revoked leases at their next heartbeat."""
        with self._unit(write=True) as session:
            job = self._lock_job(session, job_id)
            if JobState(job.state).is_final:
                return _job(job)
            check_transition(job.state, JobState.CANCELLED)
            self._cancel_unfinished_shards(session, job_id, reason, now)
            session.execute(
                update(ValidationRow)
                .where(
                    ValidationRow.job_id == job_id,
                    ValidationRow.state.in_([VALIDATION_PENDING, VALIDATION_LEASED]),
                )
                .values(state=VALIDATION_CANCELLED, updated_at=now)
            )
            self._move_job(
                session, job, JobState.CANCELLED, now, status=f"cancelled: {reason}", error=reason
            )
            return _job(session.get_one(JobRow, job_id, populate_existing=True))

    def job_rollup(self, job_id: str) -> JobRollup:
        with self._unit() as session:
            self._job_row(session, job_id)
            return shard_rules.rollup(s.as_shard() for s in self._shards(session, job_id))

    def job_tasks(self, job_id: str) -> list[JobTask]:
        with self._unit() as session:
            return self._tasks(session, job_id)

    # -- shards and leases -----------------------------------------------------------------

    def shards_of(self, job_id: str) -> list[StoredShard]:
        with self._unit() as session:
            return self._shards(session, job_id)

    def get_shard(self, shard_id: str) -> StoredShard | None:
        with self._unit() as session:
            row = session.get(ShardRow, shard_id)
            return self._stored(session, row) if row else None

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
        agent = self._agent_row(session, agent_id)
        if agent.fingerprint_id != fingerprint_id:
            raise AgentMismatch(
                f"agent {agent_id} registered fingerprint {agent.fingerprint_id}, "
                f"not {fingerprint_id}",
                "register again with this box's fingerprint",
            )
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
    ) -> HeartbeatVerdict:
        """Compare the leases a heartbeat lists with the ones granted to its agent
        (`coordinator.shards.reconcile_heartbeat`); leases it lost are re-queued here, the
        ones it must stop are returned for the reply."""
        running = list(running)
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
                _seconds(now),
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

    # -- job events ------------------------------------------------------------------------

    def append_event(
        self, job_id: str, kind: str, payload: dict[str, Any], now: datetime
    ) -> int:
        """Record an event of a job; returns its sequence number."""
        with self._unit(write=True) as session:
            self._lock_job(session, job_id)
            return self._append_event(session, job_id, kind, payload, now)

    def events_after(self, job_id: str, after_sequence: int = 0, limit: int = 100) -> list[JobEvent]:
        """A job's events with a sequence above ``after_sequence``, oldest first."""
        query = (
            select(JobEventRow)
            .where(JobEventRow.job_id == job_id, JobEventRow.id > after_sequence)
            .order_by(JobEventRow.id)
            .limit(limit)
        )
        with self._unit() as session:
            return [_event(row) for row in session.scalars(query)]

    def last_event_sequence(self, job_id: str) -> int:
        """Where a watch that starts "from now" resumes after (0: the job has no events)."""
        query = (
            select(JobEventRow.id)
            .where(JobEventRow.job_id == job_id)
            .order_by(JobEventRow.id.desc())
            .limit(1)
        )
        with self._unit() as session:
            return session.scalar(query) or 0

    # -- validations -----------------------------------------------------------------------

    def create_validation(
        self,
        job_id: str,
        *,
        library: bytes,
        lib_format: str,
        reference_library: bytes | None,
        inputs: list[dict[str, Any]],
        weights: list[dict[str, Any]],
        seed: int,
        runs: int,
        warmup: int,
        now: datetime,
    ) -> Validation:
        """A built library waiting for an agent of the job's fingerprint to check and time it.
        A validation that ended is replaced (the job was rebuilt)."""
        library = bytes(library)
        fields = {
            "state": VALIDATION_PENDING,
            "attempt": 0,
            "agent_id": None,
            "leased_at": None,
            "library": library,
            "library_sha256": hashlib.sha256(library).hexdigest(),
            "lib_format": lib_format,
            "reference_library": None if reference_library is None else bytes(reference_library),
            "inputs": inputs,
            "weights": weights,
            "seed": seed,
            "runs": runs,
            "warmup": warmup,
            "result": None,
            "failures": [],
            "created_at": now,
            "updated_at": now,
        }
        with self._unit(write=True) as session:
            self._lock_job(session, job_id)
            existing = session.get(ValidationRow, job_id)
            if existing is not None:
                if existing.state in (VALIDATION_PENDING, VALIDATION_LEASED):
                    raise RegistryError(
                        f"job {job_id} already has a validation {existing.state}",
                        "wait for it to end, or cancel the job",
                    )
                session.delete(existing)
                session.flush()
            row = ValidationRow(job_id=job_id, **fields)
            session.add(row)
            session.flush()
            return _validation(row)

    def get_validation(self, job_id: str) -> Validation | None:
        with self._unit() as session:
            row = session.get(ValidationRow, job_id)
            return _validation(row) if row else None

    def claim_validation(
        self, agent_id: str, fingerprint_id: str, now: datetime
    ) -> ValidationLease | None:
        """Lease the oldest pending validation of a validating job on this agent's
        fingerprint, with the library bytes, or None."""
        for _ in range(_CLAIM_TRIES):
            with self._unit(write=True) as session:
                outcome = self._claim_validation_once(session, agent_id, fingerprint_id, now)
            if outcome is not _RACED:
                return outcome  # type: ignore[return-value]
        return None

    def _claim_validation_once(
        self, session: Session, agent_id: str, fingerprint_id: str, now: datetime
    ) -> ValidationLease | None | object:
        agent = self._agent_row(session, agent_id)
        if agent.fingerprint_id != fingerprint_id:
            raise AgentMismatch(
                f"agent {agent_id} registered fingerprint {agent.fingerprint_id}, "
                f"not {fingerprint_id}",
                "register again with this box's fingerprint",
            )
        job_id = session.scalar(
            select(ValidationRow.job_id)
            .join(JobRow, JobRow.id == ValidationRow.job_id)
            .where(
                ValidationRow.state == VALIDATION_PENDING,
                JobRow.state == JobState.VALIDATING.value,
                JobRow.fingerprint_id == fingerprint_id,
                JobRow.target_kind.in_(agent.target_kinds),
            )
            .order_by(ValidationRow.created_at, ValidationRow.job_id)
            .limit(1)
        )
        if job_id is None:
            return None
        job = self._lock_job(session, job_id)
        attempt = session.scalar(
            select(ValidationRow.attempt).where(
                ValidationRow.job_id == job_id, ValidationRow.state == VALIDATION_PENDING
            )
        )
        if job.state != JobState.VALIDATING.value or attempt is None:
            return _RACED
        result = session.execute(
            update(ValidationRow)
            .where(
                ValidationRow.job_id == job_id,
                ValidationRow.state == VALIDATION_PENDING,
                ValidationRow.attempt == attempt,
            )
            .values(
                state=VALIDATION_LEASED,
                attempt=attempt + 1,
                agent_id=agent_id,
                leased_at=now,
                updated_at=now,
            )
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return _RACED
        row = session.scalars(
            select(ValidationRow)
            .where(ValidationRow.job_id == job_id)
            .options(undefer(ValidationRow.library), undefer(ValidationRow.reference_library))
            .execution_options(populate_existing=True)
        ).one()
        return ValidationLease(
            validation=_validation(row),
            job=_job(job),
            library=bytes(row.library),
            reference_library=None if row.reference_library is None else bytes(row.reference_library),
        )

    def finish_validation(
        self, job_id: str, attempt: int, agent_id: str, result: dict[str, Any], now: datetime
    ) -> ValidationChange:
        """Keep the outcome of a validation lease (outputs check, latency), if still current.
        Moving the job on (artifact, succeeded or failed) is the coordinator's next step."""
        with self._unit(write=True) as session:
            stale = self._stale_validation(session, job_id, attempt, agent_id)
            if stale is not None:
                return stale
            session.execute(
                update(ValidationRow)
                .where(ValidationRow.job_id == job_id, ValidationRow.attempt == attempt)
                .values(state=VALIDATION_DONE, result=result, updated_at=now)
            )
            return ValidationChange(True, None, _validation(self._validation_row(session, job_id)))

    def fail_validation(
        self,
        job_id: str,
        attempt: int,
        agent_id: str,
        reason: str,
        now: datetime,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> ValidationChange:
        """The library could not be checked under this lease: pending again, or failed
        after ``max_attempts``, every attempt's reason kept."""
        with self._unit(write=True) as session:
            stale = self._stale_validation(session, job_id, attempt, agent_id)
            if stale is not None:
                return stale
            row = self._validation_row(session, job_id)
            failures = list(row.failures) + [_failure_json(attempt, agent_id, reason, now)]
            final = len(failures) >= max_attempts
            session.execute(
                update(ValidationRow)
                .where(ValidationRow.job_id == job_id, ValidationRow.attempt == attempt)
                .values(
                    state=VALIDATION_FAILED if final else VALIDATION_PENDING,
                    agent_id=agent_id if final else None,
                    leased_at=row.leased_at if final else None,
                    failures=failures,
                    updated_at=now,
                )
            )
            return ValidationChange(True, None, _validation(self._validation_row(session, job_id)))

    def expire_validations(
        self, now: datetime, ttl: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[Validation]:
        """Validation leases whose agent went silent for ``ttl``, re-queued or failed."""
        cutoff = now - timedelta(seconds=ttl)
        query = (
            select(ValidationRow.job_id, ValidationRow.attempt, ValidationRow.agent_id)
            .outerjoin(AgentRow, AgentRow.id == ValidationRow.agent_id)
            .where(
                ValidationRow.state == VALIDATION_LEASED,
                ValidationRow.leased_at < cutoff,
                or_(AgentRow.last_heartbeat_at.is_(None), AgentRow.last_heartbeat_at < cutoff),
            )
            .order_by(ValidationRow.job_id)
        )
        with self._unit() as session:
            expired = session.execute(query).all()
        changed = []
        # Each in its own unit of work, re-checked there: a report may land in between.
        for job_id, attempt, agent_id in expired:
            reason = f"agent {agent_id} sent no heartbeat for over {ttl:.0f}s (lease TTL)"
            outcome = self.fail_validation(job_id, attempt, agent_id, reason, now, max_attempts)
            if outcome.accepted:
                changed.append(outcome.validation)
        return changed

    # -- plumbing --------------------------------------------------------------------------

    def _lock_job(self, session: Session, job_id: str) -> JobRow:
        """The job row, locked until commit (SQLite: the whole database already is).

        FOR NO KEY UPDATE: inserts of rows referencing the job (events, records) need not
        wait for it, only other writers of the job itself.
        """
        row = session.scalars(
            select(JobRow)
            .where(JobRow.id == job_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        ).one_or_none()
        if row is None:
            raise NotFound(f"no job {job_id!r} in the registry at {self.url}", "see `farm jobs list`")
        return row

    def _job_row(self, session: Session, job_id: str) -> JobRow:
        row = session.get(JobRow, job_id, populate_existing=True)
        if row is None:
            raise NotFound(f"no job {job_id!r} in the registry at {self.url}", "see `farm jobs list`")
        return row

    def _agent_row(self, session: Session, agent_id: str) -> AgentRow:
        row = session.get(AgentRow, agent_id)
        if row is None:
            raise UnknownAgent(
                f"agent {agent_id!r} is not registered with the coordinator at {self.url}",
                "register again",
            )
        return row

    def _validation_row(self, session: Session, job_id: str) -> ValidationRow:
        row = session.get(ValidationRow, job_id, populate_existing=True)
        if row is None:
            raise NotFound(f"job {job_id} has no validation in the registry at {self.url}")
        return row

    def _stale_validation(
        self, session: Session, job_id: str, attempt: int, agent_id: str
    ) -> ValidationChange | None:
        """Why a report about a validation lease must be dropped (locking it), or None."""
        self._lock_job(session, job_id)
        row = session.scalars(
            select(ValidationRow)
            .where(ValidationRow.job_id == job_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()
        if row is None:
            raise NotFound(f"job {job_id} has no validation in the registry at {self.url}")
        reason = None
        if attempt != row.attempt:
            reason = f"attempt {attempt} of the validation of {job_id} is stale (latest {row.attempt})"
        elif row.state != VALIDATION_LEASED:
            reason = f"attempt {attempt} of the validation of {job_id} is over: it is {row.state}"
        elif row.agent_id != agent_id:
            reason = f"attempt {attempt} of the validation of {job_id} was granted to {row.agent_id}"
        return None if reason is None else ValidationChange(False, reason, _validation(row))

    def _locked_shard(self, session: Session, shard_id: str) -> ShardRow | None:
        """The shard row, locked after its job row (the lock order)."""
        job_id = session.scalar(select(ShardRow.job_id).where(ShardRow.id == shard_id))
        if job_id is None:
            return None
        self._lock_job(session, job_id)
        return session.scalars(
            select(ShardRow)
            .where(ShardRow.id == shard_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()

    def _shard_for_change(self, session: Session, shard_id: str) -> StoredShard:
        row = self._locked_shard(session, shard_id)
        if row is None:
            raise NotFound(f"no shard {shard_id!r} in the registry at {self.url}")
        return self._stored(session, row)

    def _task_names(self, session: Session, job_id: str) -> dict[int, str]:
        query = select(JobTaskRow.index, JobTaskRow.name).where(JobTaskRow.job_id == job_id)
        return {index: name for index, name in session.execute(query)}

    def _stored(self, session: Session, row: ShardRow, names: dict[int, str] | None = None) -> StoredShard:
        names = self._task_names(session, row.job_id) if names is None else names
        return _stored_shard(row, [names[i] for i in row.task_indexes])

    def _reread(self, session: Session, shard_id: str) -> StoredShard:
        return self._stored(session, session.get_one(ShardRow, shard_id, populate_existing=True))

    def _shards(self, session: Session, job_id: str) -> list[StoredShard]:
        names = self._task_names(session, job_id)
        query = (
            select(ShardRow)
            .where(ShardRow.job_id == job_id)
            .order_by(ShardRow.index)
            .execution_options(populate_existing=True)
        )
        return [self._stored(session, row, names) for row in session.scalars(query)]

    def _tasks(self, session: Session, job_id: str) -> list[JobTask]:
        query = select(JobTaskRow).where(JobTaskRow.job_id == job_id).order_by(JobTaskRow.index)
        return [_job_task(row) for row in session.scalars(query)]

    def _rollup(self, session: Session, job_id: str) -> JobRollup:
        return shard_rules.rollup(s.as_shard() for s in self._shards(session, job_id))

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

    def _cancel_unfinished_shards(
        self, session: Session, job_id: str, reason: str, now: datetime
    ) -> None:
        # The guard is the transition table's own list of states that may become cancelled.
        sources = sorted(s.value for s in allowed_sources(ShardState.CANCELLED))
        ids = session.scalars(
            select(ShardRow.id)
            .where(ShardRow.job_id == job_id, ShardRow.state.in_(sources))
            .order_by(ShardRow.id)
            .with_for_update()
        ).all()
        if not ids:
            return
        session.execute(
            update(ShardRow)
            .where(ShardRow.id.in_(ids), ShardRow.state.in_(sources))
            .values(state=ShardState.CANCELLED.value, heartbeat_deadline=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        for shard_id in ids:
            shard = self._reread(session, shard_id)
            self._append_event(session, job_id, "shard_changed", _shard_event(shard, reason), now)

    def _settle_job(self, session: Session, job_id: str, now: datetime) -> JobRollup:
        """What the shards now mean for their job: a failed shard fails it (cancelling the
        rest); otherwise the status line follows the count of shards done."""
        rollup = self._rollup(session, job_id)
        job = self._job_row(session, job_id)
        if JobState(job.state).is_final:
            return rollup
        if rollup.outcome is JobOutcome.FAILED:
            self._cancel_unfinished_shards(session, job_id, "another shard of the job failed", now)
            self._move_job(
                session,
                job,
                JobState.FAILED,
                now,
                status=f"failed: {len(rollup.failed)} shard(s) used up their attempts",
                error=rollup.error,
            )
            return self._rollup(session, job_id)
        if job.state == JobState.RUNNING.value:
            total = sum(rollup.counts.values())
            status = (
                f"tuning done: {total}/{total} shards; waiting to build"
                if rollup.outcome is JobOutcome.READY_TO_BUILD
                else _tuning_status(rollup.counts[ShardState.DONE], total)
            )
            session.execute(
                update(JobRow)
                .where(JobRow.id == job_id)
                .values(status=status)
                .execution_options(synchronize_session=False)
            )
        return rollup

    def _move_job(
        self,
        session: Session,
        job: JobRow,
        new: JobState,
        now: datetime,
        *,
        status: str,
        error: str | None = None,
    ) -> None:
        """Move a job to ``new`` if coordinator.jobs allows it, guarded by the state read."""
        old = job.state
        check_transition(old, new)
        values: dict[str, Any] = {"state": new.value, "status": status}
        if new is JobState.RUNNING:
            values["started_at"] = now
        if new.is_final:
            values["finished_at"] = now
        if error is not None:
            values["error"] = error
        result = session.execute(
            update(JobRow)
            .where(JobRow.id == job.id, JobRow.state == old)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise RegistryError(
                f"job {job.id} left {old} while it was being moved to {new.value}",
                "another coordinator changed it first; reload the job",
            )
        self._append_event(
            session,
            job.id,
            "state_changed",
            {"from": old, "to": new.value, "status": status, "error": error or ""},
            now,
        )

    def _append_event(
        self, session: Session, job_id: str, kind: str, payload: dict[str, Any], now: datetime
    ) -> int:
        if self._postgres:
            # Sequence values are handed out before commit, so two writers of one job could
            # commit 11 before 10 and a watcher resuming after 11 would never see 10. Holding
            # the job row while the id is taken makes each job's events commit in order.
            # (Callers already hold it, by the lock order; taking it twice is free.)
            session.execute(
                select(JobRow.id).where(JobRow.id == job_id).with_for_update(key_share=True)
            )
        row = JobEventRow(job_id=job_id, kind=kind, payload=payload, created_at=now)
        session.add(row)
        session.flush()
        return row.id


def _tuning_status(done: int, total: int) -> str:
    return f"tuning: {done}/{total} shards done"


def _failure_json(attempt: int, agent_id: str | None, reason: str, at: datetime) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "agent_id": agent_id,
        "reason": reason,
        "at": at.astimezone(timezone.utc).isoformat(),
    }


def _failures_json(old: Sequence[ShardFailure], new: Shard, now: datetime) -> list[dict[str, Any]]:
    """The stored failures plus the ones coordinator.shards appended, stamped ``now``."""
    kept = [
        _failure_json(f.attempt, f.agent_id, f.reason, f.at or now) for f in old
    ]
    added = [_failure_json(f.attempt, f.agent_id, f.reason, now) for f in new.failures[len(old) :]]
    return kept + added


def _failures(values: list[dict[str, Any]]) -> list[ShardFailure]:
    return [
        ShardFailure(
            attempt=v["attempt"],
            agent_id=v.get("agent_id"),
            reason=v["reason"],
            at=datetime.fromisoformat(v["at"]) if v.get("at") else None,
        )
        for v in values
    ]


def _agent(row: AgentRow) -> Agent:
    return Agent(
        id=row.id,
        fingerprint_id=row.fingerprint_id,
        target_kinds=list(row.target_kinds),
        hostname=row.hostname,
        address=row.address,
        tvm_version=row.tvm_version,
        rpc_key=row.rpc_key,
        state=row.state,
        registered_at=row.registered_at,
        last_heartbeat_at=row.last_heartbeat_at,
        details=row.details,
    )


def _stored_shard(row: ShardRow, task_names: list[str]) -> StoredShard:
    return StoredShard(
        id=row.id,
        job_id=row.job_id,
        index=row.index,
        state=ShardState(row.state),
        attempt=row.attempt,
        agent_id=row.agent_id,
        leased_at=row.leased_at,
        heartbeat_deadline=row.heartbeat_deadline,
        task_indexes=list(row.task_indexes),
        task_names=task_names,
        cost=row.cost,
        trials_budget=row.trials_budget,
        trials_done=row.trials_done,
        failures=_failures(row.failures),
        updated_at=row.updated_at,
    )


def _job_task(row: JobTaskRow) -> JobTask:
    return JobTask(
        job_id=row.job_id,
        index=row.index,
        name=row.name,
        weight=row.weight,
        flop=row.flop,
        workload_shash=row.workload_shash,
        mod_json=row.mod_json,
        workload_id=row.workload_id,
        trials_budget=row.trials_budget,
    )


def _event(row: JobEventRow) -> JobEvent:
    return JobEvent(
        sequence=row.id, job_id=row.job_id, kind=row.kind, payload=row.payload, created_at=row.created_at
    )


def _validation(row: ValidationRow) -> Validation:
    return Validation(
        job_id=row.job_id,
        state=row.state,
        attempt=row.attempt,
        agent_id=row.agent_id,
        leased_at=row.leased_at,
        library_sha256=row.library_sha256,
        lib_format=row.lib_format,
        inputs=row.inputs,
        weights=row.weights,
        seed=row.seed,
        runs=row.runs,
        warmup=row.warmup,
        result=row.result,
        failures=_failures(row.failures),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
