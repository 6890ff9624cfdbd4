"""Validations: a built library leased to an agent of the job's fingerprint, to check and time it.

What may happen to a validation is decided by foundation.domain.validations; this module reads
rows into its values and writes the result back, guarded by the state and attempt it read.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, undefer

from foundation.domain import validations as validation_rules
from foundation.domain.jobs import JobState
from foundation.domain.leases import DEFAULT_MAX_ATTEMPTS, StaleAttempt
from foundation.domain.validations import ValidationState
from foundation.errors import NotFound, RegistryError
from foundation.registry.entities import Validation, ValidationChange, ValidationLease
from foundation.registry.schema import AgentRow, JobRow, ValidationRow
from foundation.registry.session import Changes, UnitOfWork

from .guarded_update import update_lease
from .locking import RowLocks

# A claim that finds its candidate taken (another coordinator won) tries again this often
# before answering "no work now"; the agent asks again later anyway.
_CLAIM_TRIES = 4
_RACED = object()


class ValidationStore:
    """Built libraries waiting for, leased to, and checked by agents; one per job."""

    def __init__(self, unit: UnitOfWork, locks: RowLocks):
        self._unit = unit
        self._locks = locks

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
            "state": ValidationState.PENDING.value,
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
        with self._unit.write(Changes.STATE) as session:
            self._locks.lock_job(session, job_id)
            existing = session.get(ValidationRow, job_id)
            if existing is not None:
                if not ValidationState(existing.state).is_final:
                    raise RegistryError(
                        f"job {job_id} already has a validation {existing.state}",
                        "wait for it to end, or cancel the job",
                    )
                session.delete(existing)
                session.flush()
            row = ValidationRow(job_id=job_id, **fields)
            session.add(row)
            session.flush()
            return row.to_entity()

    def pending_validations(self) -> set[tuple[str, str]]:
        """(fingerprint id, target kind) of every validating job whose validation waits for an
        agent: what `claim_validation` could lease."""
        query = (
            select(JobRow.fingerprint_id, JobRow.target_kind)
            .join(ValidationRow, ValidationRow.job_id == JobRow.id)
            .where(ValidationRow.state == ValidationState.PENDING.value, JobRow.state == JobState.VALIDATING.value)
            .distinct()
        )
        with self._unit.read() as session:
            return {(fp, kind) for fp, kind in session.execute(query) if fp is not None}

    def get_validation(self, job_id: str) -> Validation | None:
        with self._unit.read() as session:
            row = session.get(ValidationRow, job_id)
            return row.to_entity() if row else None

    def validation_library(self, job_id: str, reference: bool = False) -> bytes | None:
        """The library bytes of a job's validation, or with ``reference`` its untuned build's (None: it
        has none). A claim hands them out with its lease; the coordinator reads them again to commit
        the artifact (the untuned build, when it ran faster)."""
        column = ValidationRow.reference_library if reference else ValidationRow.library
        query = select(column).where(ValidationRow.job_id == job_id)
        with self._unit.read() as session:
            library = session.scalar(query)
        return None if library is None else bytes(library)

    def claim_validation(
        self, agent_id: str, fingerprint_id: str, now: datetime
    ) -> ValidationLease | None:
        """Lease the oldest pending validation of a validating job on this agent's
        fingerprint, with the library bytes, or None."""
        for _ in range(_CLAIM_TRIES):
            with self._unit.write(Changes.STATE) as session:
                outcome = self._claim_validation_once(session, agent_id, fingerprint_id, now)
            if outcome is not _RACED:
                return outcome  # type: ignore[return-value]
        return None

    def _claim_validation_once(
        self, session: Session, agent_id: str, fingerprint_id: str, now: datetime
    ) -> ValidationLease | None | object:
        agent = self._locks.claiming_agent(session, agent_id, fingerprint_id)
        job_id = session.scalar(
            select(ValidationRow.job_id)
            .join(JobRow, JobRow.id == ValidationRow.job_id)
            .where(
                ValidationRow.state == ValidationState.PENDING.value,
                JobRow.state == JobState.VALIDATING.value,
                JobRow.fingerprint_id == fingerprint_id,
                JobRow.target_kind.in_(agent.target_kinds),
            )
            .order_by(ValidationRow.created_at, ValidationRow.job_id)
            .limit(1)
        )
        if job_id is None:
            return None
        job = self._locks.lock_job(session, job_id)
        row = session.scalars(
            select(ValidationRow)
            .where(ValidationRow.job_id == job_id)
            .execution_options(populate_existing=True)
        ).one_or_none()
        if job.state != JobState.VALIDATING.value or row is None or row.state != ValidationState.PENDING.value:
            return _RACED
        old = row.to_entity()
        new = validation_rules.claim(old.as_validation(), agent_id, now.timestamp())
        if not self._write_validation(session, old, new, now):
            return _RACED
        row = session.scalars(
            select(ValidationRow)
            .where(ValidationRow.job_id == job_id)
            .options(undefer(ValidationRow.library), undefer(ValidationRow.reference_library))
            .execution_options(populate_existing=True)
        ).one()
        return ValidationLease(
            validation=row.to_entity(),
            job=job.to_entity(),
            library=bytes(row.library),
            reference_library=None if row.reference_library is None else bytes(row.reference_library),
        )

    def finish_validation(
        self, job_id: str, attempt: int, agent_id: str, result: dict[str, Any], now: datetime
    ) -> ValidationChange:
        """Keep the outcome of a validation lease (outputs check, latency), if still current.
        Moving the job on (artifact, succeeded or failed) is the coordinator's next step."""
        with self._unit.write(Changes.STATE) as session:
            old = self._locked_validation(session, job_id).to_entity()
            try:
                new = validation_rules.finish(old.as_validation(), attempt, agent_id)
            except StaleAttempt as exc:
                return ValidationChange(False, str(exc), old)
            return self._apply_change(session, old, new, now, result=result)

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
        with self._unit.write(Changes.STATE) as session:
            old = self._locked_validation(session, job_id).to_entity()
            try:
                new = validation_rules.fail_attempt(old.as_validation(), attempt, reason, max_attempts, agent_id)
            except StaleAttempt as exc:
                return ValidationChange(False, str(exc), old)
            return self._apply_change(session, old, new, now)

    def expire_validations(
        self, now: datetime, ttl: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[Validation]:
        """Validation leases whose agent went silent for ``ttl``, re-queued or failed
        (`foundation.domain.validations.expire`)."""
        cutoff = now - timedelta(seconds=ttl)
        # Leased before the cutoff: the others cannot have been silent for long enough.
        query = (
            select(ValidationRow, AgentRow.last_heartbeat_at)
            .outerjoin(AgentRow, AgentRow.id == ValidationRow.agent_id)
            .where(ValidationRow.state == ValidationState.LEASED.value, ValidationRow.leased_at < cutoff)
            .order_by(ValidationRow.job_id)
        )
        with self._unit.read() as session:
            found = [(row.to_entity(), beat) for row, beat in session.execute(query)]
        heartbeats = {v.agent_id: beat.timestamp() for v, beat in found if v.agent_id and beat}
        expired = validation_rules.expire(
            [v.as_validation() for v, _ in found], heartbeats, now.timestamp(), ttl, max_attempts
        )
        changed = []
        # Each in its own unit of work, decided again there: a report may land in between.
        for new in expired:
            failure = new.failures[-1]
            outcome = self.fail_validation(
                new.job_id, failure.attempt, failure.agent_id, failure.reason, now, max_attempts
            )
            if outcome.accepted:
                changed.append(outcome.validation)
        return changed

    def cancel_in(self, session: Session, job_id: str, now: datetime) -> None:
        """Cancel the job's validation if it has not ended, within the caller's unit of work
        (which holds the job's row): a cancelled job takes its validation with it."""
        # The transition table's own list of states that may become cancelled.
        unfinished = sorted(s.value for s in validation_rules.allowed_sources(ValidationState.CANCELLED))
        session.execute(
            update(ValidationRow)
            .where(ValidationRow.job_id == job_id, ValidationRow.state.in_(unfinished))
            .values(state=ValidationState.CANCELLED.value, updated_at=now)
        )

    def _validation_row(self, session: Session, job_id: str) -> ValidationRow:
        row = session.get(ValidationRow, job_id, populate_existing=True)
        if row is None:
            raise NotFound(f"job {job_id} has no validation in the registry at {self._locks.url}")
        return row

    def _locked_validation(self, session: Session, job_id: str) -> ValidationRow:
        """The job's validation row, locked after its job row (the lock order)."""
        self._locks.lock_job(session, job_id)
        row = session.scalars(
            select(ValidationRow)
            .where(ValidationRow.job_id == job_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()
        if row is None:
            raise NotFound(f"job {job_id} has no validation in the registry at {self._locks.url}")
        return row

    def _write_validation(
        self, session: Session, old: Validation, new: validation_rules.Validation, now: datetime, **fields: Any
    ) -> bool:
        """Write a transition decided by foundation.domain.validations, guarded by the state and
        attempt it was decided from (`update_lease`); False if another writer changed it first."""
        # A claim starts a lease now; a retry waits for the next; an end keeps the last one's.
        if new.state is ValidationState.LEASED:
            leased_at = now
        elif new.state is ValidationState.PENDING:
            leased_at = None
        else:
            leased_at = old.leased_at
        return update_lease(session, ValidationRow, ValidationRow.job_id == old.job_id, old, new, now,
                            leased_at=leased_at, **fields)

    def _apply_change(
        self, session: Session, old: Validation, new: validation_rules.Validation, now: datetime, **fields: Any
    ) -> ValidationChange:
        if not self._write_validation(session, old, new, now, **fields):
            # Unreachable while the validation row is locked; kept as the guard of last resort.
            raise RegistryError(f"the validation of job {old.job_id} changed while it was being updated",
                                "retry the call")
        return ValidationChange(True, None, self._validation_row(session, old.job_id).to_entity())
