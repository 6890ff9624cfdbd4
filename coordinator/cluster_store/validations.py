"""Validations: a built library leased to an agent of the job's fingerprint, to check and time it."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session, undefer

from foundation.domain.jobs import JobState
from foundation.domain.shards import DEFAULT_MAX_ATTEMPTS
from foundation.errors import NotFound, RegistryError
from foundation.registry.entities import Validation, ValidationChange, ValidationLease
from foundation.registry.schema import AgentRow, JobRow, ValidationRow
from foundation.registry.store import _job

from .locking import _CLAIM_TRIES, _RACED, RowLocks
from .rows import _failure_json, _validation

# Validation leases: pending -> leased -> done, leased -> pending (retry) or failed.
VALIDATION_PENDING = "pending"
VALIDATION_LEASED = "leased"
VALIDATION_DONE = "done"
VALIDATION_FAILED = "failed"
VALIDATION_CANCELLED = "cancelled"


class ValidationLeases(RowLocks):
    """Built libraries waiting for, leased to, and checked by agents; one per job."""

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

    def pending_validations(self) -> set[tuple[str, str]]:
        """(fingerprint id, target kind) of every validating job whose validation waits for an
        agent: what `claim_validation` could lease."""
        query = (
            select(JobRow.fingerprint_id, JobRow.target_kind)
            .join(ValidationRow, ValidationRow.job_id == JobRow.id)
            .where(ValidationRow.state == VALIDATION_PENDING, JobRow.state == JobState.VALIDATING.value)
            .distinct()
        )
        with self._unit() as session:
            return {(fp, kind) for fp, kind in session.execute(query) if fp is not None}

    def get_validation(self, job_id: str) -> Validation | None:
        with self._unit() as session:
            row = session.get(ValidationRow, job_id)
            return _validation(row) if row else None

    def validation_library(self, job_id: str) -> bytes | None:
        """The library bytes of a job's validation (None: it has none). A claim hands them
        out with its lease; the coordinator reads them again to commit the artifact."""
        query = select(ValidationRow.library).where(ValidationRow.job_id == job_id)
        with self._unit() as session:
            library = session.scalar(query)
        return None if library is None else bytes(library)

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
        agent = self._claiming_agent(session, agent_id, fingerprint_id)
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
