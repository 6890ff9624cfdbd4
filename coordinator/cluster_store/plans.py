"""A job's plan (its tasks and shards), and what the states of its shards mean for the job."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from foundation.domain import shard_split
from foundation.domain.job_rollup import JobOutcome, JobRollup, rollup
from foundation.domain.jobs import JobState, check_transition
from foundation.domain.shards import Shard, ShardState, allowed_sources
from foundation.errors import RegistryError
from foundation.registry.entities import Job, JobTask, PlannedTask, StoredShard
from foundation.registry.schema import JobRow, JobTaskRow, ShardRow
from foundation.registry.session import Changes, UnitOfWork, WriteSession
from foundation.registry.store import RegistryStore

from .events import EventLog
from .jobs import JobStore
from .locking import RowLocks
from .validations import ValidationStore


class PlanStore:
    """The tasks and shards of planned jobs; a job settles as its shards end, and a
    cancelled job takes its unfinished shards and validation with it. The ``*_in`` methods
    read and settle within the caller's unit of work (coordinator.cluster_store.leases)."""

    def __init__(self, unit: UnitOfWork, registry: RegistryStore, locks: RowLocks, jobs: JobStore,
                 events: EventLog, validations: ValidationStore):
        self._unit = unit
        self._registry = registry  # workloads, committed with the plan that names them
        self._locks = locks
        self._jobs = jobs
        self._events = events
        self._validations = validations

    def shards_of(self, job_id: str) -> list[StoredShard]:
        with self._unit.read() as session:
            return self.shards_in(session, job_id)

    def get_shard(self, shard_id: str) -> StoredShard | None:
        with self._unit.read() as session:
            row = session.get(ShardRow, shard_id)
            return self.stored_in(session, row) if row else None

    def add_job_plan(
        self,
        job_id: str,
        tasks: Sequence[PlannedTask],
        shards: Sequence[Shard],
        now: datetime,
    ) -> list[StoredShard]:
        """Store a queued job's tasks and its shards (`foundation.domain.shard_split.split_tasks`) and
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
        with self._unit.write(Changes.STATE) as session:
            job = self._locks.lock_job(session, job_id)
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
                        workload_id=self._registry.records.commit_workload_in(
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
            self._jobs.move_in(session, job, JobState.RUNNING, now, status=_tuning_status(0, len(shards)))
            return self.shards_in(session, job_id)

    def add_round(
        self,
        job_id: str,
        tasks: Sequence[PlannedTask],
        shards: Sequence[Shard],
        now: datetime,
        options: dict,
    ) -> list[StoredShard] | None:
        """The next round of a running job tuned in rounds (`farm submit --until`), once every
        shard of the last is done: its tasks (new ones added, known ones given this round's trials
        as their cap, the rest none) and its shards, numbered after the last round's; and the job's
        options. None, and nothing written, when the job is no longer running or a shard is not done."""
        shards = self.numbered_after(job_id, shards)
        with self._unit.write(Changes.STATE) as session:
            job = self._locks.lock_job(session, job_id)
            if job.state != JobState.RUNNING.value:
                return None
            existing = session.scalars(select(ShardRow).where(ShardRow.job_id == job_id)).all()
            if any(row.state != ShardState.DONE.value for row in existing):
                return None
            rows = {row.name: row for row in session.scalars(select(JobTaskRow).where(JobTaskRow.job_id == job_id))}
            next_index = max((row.index for row in rows.values()), default=-1) + 1
            this_round = {task.name for task in tasks}
            for row in rows.values():
                if row.name not in this_round:
                    row.trials_budget = 0
            for task in tasks:
                row = rows.get(task.name)
                if row is None:
                    row = JobTaskRow(job_id=job_id, index=next_index, name=task.name, weight=task.weight,
                                     flop=task.flop, workload_shash=task.workload_shash, mod_json=task.mod_json,
                                     workload_id=self._registry.records.commit_workload_in(session, task.workload_shash,
                                                                                   task.mod_json),
                                     trials_budget=task.trials_budget)
                    session.add(row)
                    rows[task.name] = row
                    next_index += 1
                row.trials_budget = task.trials_budget
            first = len(existing)
            for offset, shard in enumerate(shards):
                session.add(ShardRow(
                    id=shard.id, job_id=job_id, index=first + offset, state=ShardState.PENDING.value, attempt=0,
                    task_indexes=[rows[name].index for name in shard.task_names], cost=shard.cost,
                    trials_budget=shard.trial_budget, trials_done=0, failures=[], updated_at=now))
            job.options = options
            job.status = _tuning_status(first, first + len(shards))
            session.flush()
            return [s for s in self.shards_in(session, job_id) if s.id in {shard.id for shard in shards}]

    def numbered_after(self, job_id: str, shards: Sequence[Shard]) -> list[Shard]:
        """``shards`` (numbered from 0 by split_tasks) renumbered after the job's existing ones."""
        first = len(self.shards_of(job_id))
        return [replace(shard, id=shard_split.shard_id(job_id, first + i)) for i, shard in enumerate(shards)]

    def cancel_job(self, job_id: str, now: datetime, reason: str = "cancelled by user") -> Job:
        """Cancel a job and its unfinished shards and validation; a finished job is returned
        as it is. Agents learn of their revoked leases at their next heartbeat."""
        with self._unit.write(Changes.STATE) as session:
            job = self._locks.lock_job(session, job_id)
            if JobState(job.state).is_final:
                return job.to_entity()
            check_transition(job.state, JobState.CANCELLED)
            self._cancel_unfinished_shards(session, job_id, reason, now)
            self._validations.cancel_in(session, job_id, now)
            self._jobs.move_in(session, job, JobState.CANCELLED, now, status=f"cancelled: {reason}", error=reason)
            return session.get_one(JobRow, job_id, populate_existing=True).to_entity()

    def running_jobs_ready_to_build(self) -> list[str]:
        """Running jobs whose shards are all done (or that have none): `rollup` says
        READY_TO_BUILD, decided in one query instead of one per job."""
        query = (
            select(JobRow.id)
            .outerjoin(ShardRow, ShardRow.job_id == JobRow.id)
            .where(JobRow.state == JobState.RUNNING.value)
            .group_by(JobRow.id)
            .having(
                func.count(ShardRow.id)
                == func.count(case((ShardRow.state == ShardState.DONE.value, 1)))
            )
            .order_by(JobRow.id)
        )
        with self._unit.read() as session:
            return list(session.scalars(query))

    def job_rollup(self, job_id: str) -> JobRollup:
        with self._unit.read() as session:
            self._locks.job_row(session, job_id)
            return self.rollup_in(session, job_id)

    def job_tasks(self, job_id: str) -> list[JobTask]:
        with self._unit.read() as session:
            return self.tasks_in(session, job_id)

    def _task_names(self, session: Session, job_id: str) -> dict[int, str]:
        query = select(JobTaskRow.index, JobTaskRow.name).where(JobTaskRow.job_id == job_id)
        return {row.index: row.name for row in session.execute(query)}

    def stored_in(self, session: Session, row: ShardRow, names: dict[int, str] | None = None) -> StoredShard:
        """The shard of ``row`` with its task names (``names``: its job's, by task index, if read already)."""
        names = self._task_names(session, row.job_id) if names is None else names
        return row.to_entity([names[i] for i in row.task_indexes])

    def reread_in(self, session: Session, shard_id: str) -> StoredShard:
        return self.stored_in(session, session.get_one(ShardRow, shard_id, populate_existing=True))

    def shards_in(self, session: Session, job_id: str) -> list[StoredShard]:
        query = (
            select(ShardRow)
            .where(ShardRow.job_id == job_id)
            .order_by(ShardRow.index)
            .execution_options(populate_existing=True)
        )
        rows = session.scalars(query).all()
        # Tasks after shards: each statement of a PostgreSQL (read committed) transaction sees
        # what was committed when it began, and a plan commits its tasks with its shards. Read
        # the other way round, a plan committed in between gave shards without task names.
        names = self._task_names(session, job_id) if rows else {}
        return [self.stored_in(session, row, names) for row in rows]

    def tasks_in(self, session: Session, job_id: str, indexes: Iterable[int] | None = None) -> list[JobTask]:
        """The job's tasks, or those of them at ``indexes``."""
        query = select(JobTaskRow).where(JobTaskRow.job_id == job_id).order_by(JobTaskRow.index)
        if indexes is not None:
            query = query.where(JobTaskRow.index.in_(sorted(set(indexes))))
        return [row.to_entity() for row in session.scalars(query)]

    def rollup_in(self, session: Session, job_id: str) -> JobRollup:
        return rollup(s.as_shard() for s in self.shards_in(session, job_id))

    def _cancel_unfinished_shards(
        self, session: WriteSession, job_id: str, reason: str, now: datetime
    ) -> None:
        session.may_have_changed_any_lease()  # other agents' leases end here
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
            shard = self.reread_in(session, shard_id)
            self._events.append_in(session, job_id, "shard_changed", shard.changed_event(reason), now)

    def settle_job_in(self, session: WriteSession, job_id: str, now: datetime) -> JobRollup:
        """What the shards now mean for their job: a failed shard fails it (cancelling the
        rest); otherwise the status line follows the count of shards done."""
        rollup = self.rollup_in(session, job_id)
        job = self._locks.job_row(session, job_id)
        if JobState(job.state).is_final:
            return rollup
        if rollup.outcome is JobOutcome.FAILED:
            self._cancel_unfinished_shards(session, job_id, "another shard of the job failed", now)
            self._jobs.move_in(
                session,
                job,
                JobState.FAILED,
                now,
                status=f"failed: {len(rollup.failed)} shard(s) used up their attempts",
                error=rollup.error,
            )
            return self.rollup_in(session, job_id)
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


def _tuning_status(done: int, total: int) -> str:
    return f"tuning: {done}/{total} shards done"
