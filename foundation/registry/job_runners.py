"""Embedded jobs' runners in the registry: heartbeats, cancel requests, tuning locks (a RegistryStore part).

A runner is the `farm submit` process running a job (foundation.domain.runners.Runner).
Every write here names the runner it acts for and changes a row only while that runner
still holds it, so a runner judged dead and replaced cannot move anything afterwards.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlalchemy import delete, select, update

from foundation.domain.jobs import FINAL_STATES
from foundation.domain.runners import Runner

from .entities import TuningLock
from .schema import JobRow, TuningLockRow
from .session import Changes, UnitOfWork


def _holds(row_class, runner: Runner):  # type: ignore[no-untyped-def]
    return (
        (row_class.runner_host == runner.host)
        & (row_class.runner_pid == runner.pid)
        & (row_class.runner_started_at == runner.started_at)
    )


class JobRunners:
    """What the runner of an embedded job, and the commands judging it, write and read."""

    def __init__(self, unit: UnitOfWork, insert_statement: Callable):
        self._unit = unit
        self._insert = insert_statement

    # -- heartbeats and cancel requests ------------------------------------------------

    def beat(self, runner: Runner, now: dt.datetime, *, job_id: str | None = None,
             lock_scope: str | None = None) -> bool:
        """Move the heartbeat of the runner's job and lock; True if a cancel was requested."""
        # A beat changes no state that the coordinator caches reads of.
        with self._unit.write(Changes.NO_STATE) as session:
            cancel = False
            if job_id is not None:
                session.execute(
                    update(JobRow).where(JobRow.id == job_id, _holds(JobRow, runner)).values(heartbeat_at=now)
                )
                cancel = session.scalar(select(JobRow.cancel_requested_at).where(JobRow.id == job_id)) is not None
            if lock_scope is not None:
                session.execute(
                    update(TuningLockRow)
                    .where(TuningLockRow.scope == lock_scope, _holds(TuningLockRow, runner))
                    .values(heartbeat_at=now)
                )
            return cancel

    def request_cancel(self, job_id: str, now: dt.datetime) -> bool:
        """Ask the runner of ``job_id`` to stop; False if the job has no runner or is final."""
        with self._unit.write(Changes.STATE) as session:
            result = session.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.runner_host.is_not(None),
                       JobRow.state.not_in(FINAL_STATES))
                .values(cancel_requested_at=now)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    # -- tuning locks ------------------------------------------------------------------

    def take_tuning_lock(self, scope: str, description: str, runner: Runner, now: dt.datetime) -> TuningLock:
        """Take the lock of ``scope`` if it is free; returns its holder (``runner`` if taken)."""
        stmt = self._insert(TuningLockRow).values(
            scope=scope, description=description, job_id=None, runner_host=runner.host,
            runner_pid=runner.pid, runner_started_at=runner.started_at, acquired_at=now, heartbeat_at=now,
        ).on_conflict_do_nothing(index_elements=["scope"])
        with self._unit.write(Changes.STATE) as session:
            session.execute(stmt)
            return session.get_one(TuningLockRow, scope, populate_existing=True).to_entity()

    def take_over_tuning_lock(self, held: TuningLock, runner: Runner, now: dt.datetime) -> bool:
        """Take the lock from a holder judged gone; False if it changed hands meanwhile."""
        with self._unit.write(Changes.STATE) as session:
            result = session.execute(
                update(TuningLockRow)
                .where(TuningLockRow.scope == held.scope, _holds(TuningLockRow, held.runner))
                .values(job_id=None, runner_host=runner.host, runner_pid=runner.pid,
                        runner_started_at=runner.started_at, acquired_at=now, heartbeat_at=now)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    def name_tuning_lock_job(self, scope: str, runner: Runner, job_id: str) -> None:
        """Say which job the lock's holder runs (waiters show it, and follow it)."""
        with self._unit.write(Changes.NO_STATE) as session:
            session.execute(
                update(TuningLockRow).where(TuningLockRow.scope == scope, _holds(TuningLockRow, runner))
                .values(job_id=job_id)
            )

    def release_tuning_lock(self, scope: str, runner: Runner) -> None:
        with self._unit.write(Changes.STATE) as session:
            session.execute(delete(TuningLockRow).where(TuningLockRow.scope == scope, _holds(TuningLockRow, runner)))

    def get_tuning_lock(self, scope: str) -> TuningLock | None:
        with self._unit.read() as session:
            row = session.get(TuningLockRow, scope)
            return None if row is None else row.to_entity()
