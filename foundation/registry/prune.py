"""Retention: delete the artifacts and finished jobs a registry no longer needs, a batch a transaction.

Which artifacts go is foundation.domain.retention's rule, applied to the registry as read once
(`Pruning.plan`). Each batch's DELETE checks again what may have changed since (a pin, a job that
started and points at the artifact), and in the same transaction clears `jobs.artifact_id` of
the finished jobs that pointed at a deleted artifact (no foreign key says so): a prune killed at
any point leaves no job naming an artifact that is gone, and the next prune finishes the work.

Jobs go only when finished before a given time and made no artifact that stays; their tasks,
shards, events and validations go with them (ON DELETE CASCADE). Tuning records stay: they
are what tuning learned, whichever job measured them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import OperationalError

from foundation.domain.jobs import FINAL_STATES
from foundation.domain.retention import RetentionPlan, StoredLibrary, plan_retention

from .engine import registry_error, sqlite_path
from .schema import ArtifactPinRow, ArtifactRow, JobRow, TuningLockRow
from .session import Changes, UnitOfWork

# Artifacts are megabytes each: a batch of them is a transaction a reader waits behind briefly.
ARTIFACT_BATCH = 20
JOB_BATCH = 500

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PrunePlan:
    retention: RetentionPlan
    job_ids: list[str]  # oldest first
    finished_before: datetime | None  # None: jobs are not pruned


@dataclass
class PruneOutcome:
    """What a prune deleted; ``spared``: planned but kept, as something started using it meanwhile."""

    artifacts: int = 0
    artifact_bytes: int = 0
    jobs: int = 0
    jobs_unlinked: int = 0  # finished jobs whose artifact was deleted: their artifact_id is cleared
    spared: dict[str, int] = field(default_factory=lambda: {"artifacts": 0, "jobs": 0})


class Pruning:
    """Retention over a registry's unit of work (`RegistryStore.pruning`)."""

    def __init__(self, unit: UnitOfWork, engine: Engine):
        self._unit = unit
        self._engine = engine

    def plan(self, keep: int, finished_before: datetime | None) -> PrunePlan:
        """What a prune keeping ``keep`` artifacts a scope, and jobs finished since
        ``finished_before``, would delete now; reads only."""
        with self._unit.read() as session:
            pinned = set(session.scalars(select(ArtifactPinRow.artifact_id)))
            unfinished = session.execute(select(JobRow.id, JobRow.artifact_id)
                                         .where(JobRow.state.not_in(FINAL_STATES))).all()
            running_jobs = {job_id for job_id, _ in unfinished}
            running_artifacts = {artifact_id for _, artifact_id in unfinished if artifact_id}
            rows = session.execute(select(
                ArtifactRow.id, ArtifactRow.model_id, ArtifactRow.fingerprint_id, ArtifactRow.target,
                ArtifactRow.weights_layout, ArtifactRow.tvm_version, ArtifactRow.created_at, ArtifactRow.size,
                ArtifactRow.validation_passed, ArtifactRow.invalidated_at, ArtifactRow.job_id)).all()
            libraries = [
                StoredLibrary(id=r.id, model_id=r.model_id, fingerprint_id=r.fingerprint_id, target=r.target,
                              weights_layout=r.weights_layout, tvm_version=r.tvm_version, created_at=r.created_at,
                              size=r.size, validation_passed=bool(r.validation_passed),
                              invalidated=r.invalidated_at is not None, pinned=r.id in pinned,
                              in_use=r.id in running_artifacts or r.job_id in running_jobs)
                for r in rows
            ]
            retention = plan_retention(libraries, keep)
            job_ids: list[str] = []
            if finished_before is not None:
                doomed = {d.library.id for d in retention.deletions}
                made_kept = {r.job_id for r in rows if r.job_id and r.id not in doomed}
                locked = set(session.scalars(select(TuningLockRow.job_id).where(TuningLockRow.job_id.is_not(None))))
                ended = func.coalesce(JobRow.finished_at, JobRow.created_at)
                candidates = session.scalars(select(JobRow.id)
                                             .where(JobRow.state.in_(FINAL_STATES), ended < finished_before)
                                             .order_by(ended, JobRow.id))
                job_ids = [j for j in candidates if j not in made_kept and j not in locked]
            return PrunePlan(retention, job_ids, finished_before)

    def apply(self, plan: PrunePlan, progress: Progress | None = None) -> PruneOutcome:
        """Delete what ``plan`` lists, a batch a transaction, artifacts first (corrupt ones first)."""
        outcome = PruneOutcome()
        doomed = [d.library.id for d in plan.retention.deletions]
        for start in range(0, len(doomed), ARTIFACT_BATCH):
            batch = doomed[start:start + ARTIFACT_BATCH]
            gone, unlinked = self._delete_artifacts(batch)
            outcome.artifacts += len(gone)
            outcome.artifact_bytes += sum(gone.values())
            outcome.jobs_unlinked += unlinked
            outcome.spared["artifacts"] += len(batch) - len(gone)
            if progress:
                progress("artifacts", start + len(batch), len(doomed))
        for start in range(0, len(plan.job_ids), JOB_BATCH):
            batch = plan.job_ids[start:start + JOB_BATCH]
            deleted = self._delete_jobs(batch)
            outcome.jobs += deleted
            outcome.spared["jobs"] += len(batch) - deleted
            if progress:
                progress("jobs", start + len(batch), len(plan.job_ids))
        return outcome

    def _delete_artifacts(self, ids: list[str]) -> tuple[dict[str, int], int]:
        """Delete those of ``ids`` still unpinned and unused, and unlink the finished jobs that
        named them, in one transaction; the deleted ids with their sizes, and the jobs unlinked."""
        running = JobRow.state.not_in(FINAL_STATES)
        statement = (
            delete(ArtifactRow)
            .where(ArtifactRow.id.in_(ids),
                   ArtifactRow.id.not_in(select(ArtifactPinRow.artifact_id)),
                   ArtifactRow.id.not_in(select(JobRow.artifact_id).where(running, JobRow.artifact_id.is_not(None))),
                   ArtifactRow.job_id.is_(None) | ArtifactRow.job_id.not_in(select(JobRow.id).where(running)))
            .returning(ArtifactRow.id, ArtifactRow.size)
            .execution_options(synchronize_session=False)
        )
        with self._unit.write(Changes.STATE) as session:
            gone: dict[str, int] = dict(session.execute(statement).all())
            unlinked = 0
            if gone:
                unlinked = session.execute(
                    update(JobRow).where(JobRow.artifact_id.in_(list(gone))).values(artifact_id=None)
                    .execution_options(synchronize_session=False)).rowcount  # type: ignore[attr-defined]
            return gone, unlinked

    def _delete_jobs(self, ids: list[str]) -> int:
        statement = (
            delete(JobRow)
            .where(JobRow.id.in_(ids), JobRow.state.in_(FINAL_STATES),
                   JobRow.id.not_in(select(ArtifactRow.job_id).where(ArtifactRow.job_id.is_not(None))),
                   JobRow.id.not_in(select(TuningLockRow.job_id).where(TuningLockRow.job_id.is_not(None))))
            .execution_options(synchronize_session=False)
        )
        with self._unit.write(Changes.STATE) as session:
            return session.execute(statement).rowcount  # type: ignore[attr-defined]

    def vacuum_sqlite(self) -> tuple[int, int]:
        """Return a SQLite registry's free pages to the file system (VACUUM, then a WAL
        checkpoint that truncates the log); its bytes on disk before and after."""
        path = sqlite_path(self._engine.url)
        before = _file_bytes(path)
        try:
            # VACUUM runs outside any transaction: on the driver's own connection, which the
            # engine leaves in autocommit (its BEGINs are SQLAlchemy's, not pysqlite's).
            with self._engine.connect() as connection:
                driver = connection.connection.driver_connection
                driver.execute("VACUUM")
                driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise registry_error(OperationalError("VACUUM", None, exc), self._unit.url) from None
        return before, _file_bytes(path)


def _file_bytes(path: Path) -> int:
    """A SQLite registry's size on disk: its file and its write-ahead log, where committed
    pages wait until a checkpoint moves them."""
    log = path.with_name(path.name + "-wal")
    return path.stat().st_size + (log.stat().st_size if log.exists() else 0)
