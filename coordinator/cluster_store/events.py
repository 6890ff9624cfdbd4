"""A job's event log: appended while holding the job's row, read back by sequence."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from foundation.registry.entities import JobEvent
from foundation.registry.schema import JobEventRow, JobRow
from foundation.registry.session import Changes, UnitOfWork

from .locking import RowLocks


class EventLog:
    """The events of jobs, which WatchJob follows. The ``*_in`` methods append within the
    caller's unit of work, which holds the job's row (the lock order)."""

    def __init__(self, unit: UnitOfWork, locks: RowLocks, *, postgres: bool):
        self._unit = unit
        self._locks = locks
        self._postgres = postgres

    def append_event(self, job_id: str, kind: str, payload: dict[str, Any], now: datetime) -> int:
        """Record an event of a job; returns its sequence number."""
        with self._unit.write(Changes.STATE) as session:
            self._locks.lock_job(session, job_id)
            return self.append_in(session, job_id, kind, payload, now)

    def events_after(self, job_id: str, after_sequence: int = 0, limit: int = 100) -> list[JobEvent]:
        """A job's events with a sequence above ``after_sequence``, oldest first."""
        query = (
            select(JobEventRow)
            .where(JobEventRow.job_id == job_id, JobEventRow.id > after_sequence)
            .order_by(JobEventRow.id)
            .limit(limit)
        )
        with self._unit.read() as session:
            return [row.to_entity() for row in session.scalars(query)]

    def last_event_sequence(self, job_id: str) -> int:
        """Where a watch that starts "from now" resumes after (0: the job has no events)."""
        query = (
            select(JobEventRow.id)
            .where(JobEventRow.job_id == job_id)
            .order_by(JobEventRow.id.desc())
            .limit(1)
        )
        with self._unit.read() as session:
            return session.scalar(query) or 0

    def append_in(self, session: Session, job_id: str, kind: str, payload: dict[str, Any], now: datetime) -> int:
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

    def append_many_in(
        self, session: Session, job_id: str, events: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> None:
        """Many events of one job in one statement; the caller holds the job's row (see above)."""
        if events:
            session.connection().execute(
                insert(JobEventRow),
                [{"job_id": job_id, "kind": kind, "payload": payload, "created_at": now} for kind, payload in events],
            )
