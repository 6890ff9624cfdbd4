"""Jobs in the cluster store: created, attached to, bound to a fingerprint, moved between states."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from coordinator import job_metrics
from foundation.domain.job_spec import read_options
from foundation.domain.jobs import JobState, check_transition
from foundation.domain.weights_layout import WeightsLayout
from foundation.errors import RegistryError
from foundation.registry.entities import Job
from foundation.registry.schema import JobRow
from foundation.registry.session import Changes, UnitOfWork

from .events import EventLog
from .locking import RowLocks


class JobStore:
    """A job's row: its creation, its fingerprint, and its moves between JobStates, each with
    its event. `move_in` moves a job within the caller's unit of work, which holds its row."""

    def __init__(self, unit: UnitOfWork, locks: RowLocks, events: EventLog):
        self._unit = unit
        self._locks = locks
        self._events = events

    def create_job(
        self,
        *,
        model_id: str,
        target_request: str,
        target_kind: str,
        target: str,
        fingerprint_id: str | None,
        options: dict[str, Any],
        now: datetime,
        status: str = "",
        trials_budget: int = 0,
        parent_request: str | None = None,
        attach_in: WeightsLayout | None = None,
    ) -> tuple[Job, bool]:
        """A queued job and its first event, and False. With ``attach_in``, the unfinished equal job tuning
        weights in that form (`attachable_job`) and True, where there is one.

        ``fingerprint_id`` None: the job waits for an agent of ``target_kind`` (`bind_job_fingerprint`);
        ``target`` may then be empty until bound. The look and the creation are one transaction under
        the equal jobs' lock (RowLocks.lock_equal_jobs): apart, equal submits at once each saw no job and
        each made one.
        """
        with self._unit.write(Changes.STATE) as session:
            if attach_in is not None:
                matched = target_request if fingerprint_id is None else target  # unbound jobs have no canonical one
                self._locks.lock_equal_jobs(session, _equal_job_key(model_id, matched, fingerprint_id, attach_in))
                running = self._attachable_in(session, model_id, matched, fingerprint_id, attach_in)
                if running is not None:
                    return running, True
            row = JobRow.new(model_id=model_id, target=target, fingerprint_id=fingerprint_id, target_kind=target_kind,
                             target_request=target_request, trials_budget=trials_budget, options=options, now=now,
                             state=JobState.QUEUED, status=status, parent_request=parent_request)
            session.add(row)
            session.flush()
            self._events.append_in(session, row.id, "state_changed", {"from": "", "to": row.state, "status": status},
                                   now)
            return row.to_entity(), False

    def attachable_job(self, model_id: str, target: str, fingerprint_id: str | None,
                       weights_layout: WeightsLayout) -> Job | None:
        """The oldest unfinished job tuning the same model for the same target and fingerprint,
        in the same form of weights, and not in rounds (`--until`).

        With ``fingerprint_id`` None, a job still waiting for its fingerprint whose target was
        requested as ``target`` (unbound jobs have no canonical target yet).
        """
        with self._unit.read() as session:
            return self._attachable_in(session, model_id, target, fingerprint_id, weights_layout)

    @staticmethod
    def _attachable_in(session: Session, model_id: str, target: str, fingerprint_id: str | None,
                       weights_layout: WeightsLayout) -> Job | None:
        unfinished = [s.value for s in JobState if not s.is_final]
        query = select(JobRow).where(JobRow.model_id == model_id, JobRow.state.in_(unfinished))
        if fingerprint_id is None:
            query = query.where(JobRow.fingerprint_id.is_(None), JobRow.target_request == target)
        else:
            query = query.where(JobRow.fingerprint_id == fingerprint_id, JobRow.target == target)
        # The form and the goal are in the job's options (JSON); a model has few unfinished jobs.
        for row in session.scalars(query.order_by(JobRow.created_at, JobRow.id)):
            stored = read_options(row.options, row.id)
            # A job tuned in rounds has a goal of its own: no submit joins it.
            if stored.notes.weights_layout is weights_layout and stored.spec.until is None:
                return row.to_entity()
        return None

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
        with self._unit.read() as session:
            return [row.to_entity() for row in session.scalars(query)]

    def bind_job_fingerprint(
        self, job_id: str, fingerprint_id: str, target: str, now: datetime, status: str = ""
    ) -> Job | None:
        """Give a waiting job its fingerprint and canonical target; None if another
        coordinator bound it first (or it left `queued`)."""
        with self._unit.write(Changes.STATE) as session:
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
            self._events.append_in(
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
            return session.get_one(JobRow, job_id, populate_existing=True).to_entity()

    def move_job(
        self,
        job_id: str,
        current: JobState,
        new: JobState,
        now: datetime,
        *,
        status: str,
        error: str | None = None,
        **fields: Any,
    ) -> Job | None:
        """Move a job from ``current`` to ``new`` as foundation.domain.jobs allows, with its status
        line, any other ``fields`` of its row and its state_changed event, in one transaction.

        None if the job had left ``current`` (cancelled meanwhile, or moved by another
        writer). IllegalTransition for a move foundation.domain.jobs forbids; RegistryError if the
        row changed while it was being moved.
        """
        with self._unit.write(Changes.STATE) as session:
            row = self._locks.lock_job(session, job_id)
            if row.state != current.value:
                return None
            self.move_in(session, row, new, now, status=status, error=error)
            if fields:
                session.execute(
                    update(JobRow)
                    .where(JobRow.id == job_id)
                    .values(**fields)
                    .execution_options(synchronize_session=False)
                )
            return session.get_one(JobRow, job_id, populate_existing=True).to_entity()

    def move_in(
        self,
        session: Session,
        job: JobRow,
        new: JobState,
        now: datetime,
        *,
        status: str,
        error: str | None = None,
    ) -> None:
        """Move a job to ``new`` if foundation.domain.jobs allows it, guarded by the state read."""
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
        self._events.append_in(
            session,
            job.id,
            "state_changed",
            {"from": old, "to": new.value, "status": status, "error": error or ""},
            now,
        )
        # Observed once committed: a move rolled back (and perhaps tried again) is no move.
        submitted, options, job_id = job.created_at, job.options, job.id
        event.listen(session, "after_commit", lambda _: job_metrics.job_moved(new, submitted, now, options, job_id),
                     once=True)


def _equal_job_key(model_id: str, target: str, fingerprint_id: str | None, weights_layout: WeightsLayout) -> str:
    """What equal jobs share: a job of one attaches to the other (`JobStore.attachable_job`)."""
    return "\x1f".join((model_id, target, fingerprint_id or "", weights_layout.value))
