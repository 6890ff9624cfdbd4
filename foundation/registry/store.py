"""RegistryStore: every read and write of the registry, one transaction per call."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from foundation.clock import utc_now
from foundation.domain.device_probes import newer_measurement
from foundation.domain.jobs import FINAL_STATES, JobState
from foundation.domain.runners import Runner
from foundation.errors import NotFound, RegistryError, quoted

from .cost_models import CostModels
from .donor_records import DonorRecords
from .engine import check_sqlite_file, create_registry_engine, masked, parse_registry_url
from .entities import Artifact, Fingerprint, Job, Model
from .holdings import Holdings
from .job_runners import JobRunners
from .migrate import ensure_schema
from .pins import ArtifactPins
from .prune import Pruning
from .record_removal import RecordRemoval
from .schema import (
    ArtifactRow,
    Base,
    FingerprintRow,
    JobRow,
    ModelRow,
)
from .session import Changes, UnitOfWork
from .tuning_records import TuningRecords

__all__ = [
    "RegistryStore",
    "target_kind_of",
]

_JOB_FIELDS = frozenset(
    {
        "state",
        "trials_done",
        "trials_budget",
        "error",
        "artifact_id",
        "started_at",
        "finished_at",
        "cache_hit",
        "options",
        "status",
    }
)


def target_kind_of(target: str) -> str:
    """The kind ("llvm", "cuda") of a target given as TVM JSON or as a target string."""
    try:
        value = json.loads(target)
    except ValueError:
        return target.split()[0] if target.strip() else ""
    return str(value.get("kind", "")) if isinstance(value, dict) else ""


class RegistryStore:
    """The registry: fingerprints, models, jobs, artifacts, workloads and tuning records."""

    def __init__(self, url: str, *, create: bool = True):
        """Open the registry at ``url``; without ``create`` it must exist already (NotFound),
        and nothing is created (a read-only command on a mistyped path)."""
        parsed = parse_registry_url(url)
        self.url = masked(parsed)
        check_sqlite_file(parsed, create=create)
        self._engine = create_registry_engine(parsed)
        self._dialect = self._engine.dialect.name
        try:
            ensure_schema(self._engine, self.url, create=create)
        except BaseException:
            self._engine.dispose()
            raise
        self._unit = UnitOfWork(self._engine, self.url)
        # Its parts, each over the same unit of work. Workloads and tuning records:
        self.records = TuningRecords(self._unit, self.insert_statement, self._dialect, self.url)
        # Heartbeats, cancel requests and tuning locks of embedded jobs:
        self.runners = JobRunners(self._unit, self.insert_statement)
        # Cost models, per fingerprint, TVM version and kind:
        self.cost_models = CostModels(self._unit, self.insert_statement)
        # The fastest records of each workload, as donors for warm starts:
        self.donors = DonorRecords(self._unit)
        # What the registry holds, counted per fingerprint:
        self.holdings = Holdings(self._unit)
        # Pinned artifacts, and retention (`farm registry prune`):
        self.pins = ArtifactPins(self._unit, self.insert_statement)
        self.pruning = Pruning(self._unit, self._engine)
        # Tuning records removed on request (`farm registry forget`):
        self.record_removal = RecordRemoval(self._unit)

    def __repr__(self) -> str:
        return f"RegistryStore({self.url!r})"

    __str__ = __repr__

    @property
    def dialect(self) -> str:
        return self._dialect

    def dispose(self) -> None:
        self._engine.dispose()

    @property
    def unit_of_work(self) -> UnitOfWork:
        """The session helper, shared by the stores over the same engine (coordinator.cluster_store):
        their units of work may call the ``*_in(session, ...)`` methods."""
        return self._unit

    # -- plumbing --------------------------------------------------------------------

    def insert_statement(self, row_class: type[Base]):  # type: ignore[no-untyped-def]
        """INSERT with ON CONFLICT support; both dialects spell it the same way."""
        module = postgresql if self._dialect == "postgresql" else sqlite
        return module.insert(row_class)

    # -- fingerprints ----------------------------------------------------------------

    def upsert_fingerprint(
        self, fp_id: str, kind: str, summary: str, details: dict[str, Any]
    ) -> Fingerprint:
        # An unchanged row is not written again: a fleet's agents all register the same few
        # fingerprints (again after each coordinator restart), and each rewrite left a dead
        # row version that every tuning record's foreign-key check then walked
        # (docs/benchmarks.md, "Coordinator at scale").
        known = self.get_fingerprint(fp_id)
        # Measured device features (peak, bandwidth) differ a little between boxes of one fingerprint
        # and are no part of its id: the first measured stays, or every registration rewrote the row;
        # a measurement by newer probes replaces it (foundation.domain.device_probes).
        if known is not None and "device" in known.details:
            details = {**details, "device": newer_measurement(known.details["device"], details.get("device") or {})}
        if known is not None and (known.kind, known.summary, known.details) == (kind, summary, details):
            return known
        stmt = self.insert_statement(FingerprintRow).values(
            id=fp_id, kind=kind, summary=summary, details=details, created_at=utc_now()
        )
        # Details may gain fields as probes improve; the id is what identifies the hardware.
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "kind": stmt.excluded.kind,
                "summary": stmt.excluded.summary,
                "details": stmt.excluded.details,
            },
        )
        with self._unit.write(Changes.STATE) as session:
            session.execute(stmt)
            return session.get_one(FingerprintRow, fp_id, populate_existing=True).to_entity()

    def get_fingerprint(self, fp_id: str) -> Fingerprint | None:
        with self._unit.read() as session:
            row = session.get(FingerprintRow, fp_id)
            return row.to_entity() if row else None

    def list_fingerprints(self) -> list[Fingerprint]:
        with self._unit.read() as session:
            rows = session.scalars(select(FingerprintRow).order_by(FingerprintRow.created_at))
            return [r.to_entity() for r in rows]

    # -- models ----------------------------------------------------------------------

    def upsert_model(
        self,
        *,
        model_id: str,
        name: str,
        source: str,
        source_digest: str,
        batch: int,
        inputs: list[dict[str, Any]],
        weights: list[dict[str, Any]],
        num_parameters: int,
    ) -> Model:
        """Store a model once; its id is its content, so an existing row is returned as is."""
        stmt = (
            self.insert_statement(ModelRow)
            .values(
                id=model_id,
                name=name,
                source=source,
                source_digest=source_digest,
                batch=batch,
                inputs=inputs,
                weights=weights,
                num_parameters=num_parameters,
                created_at=utc_now(),
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )
        with self._unit.write(Changes.STATE) as session:
            session.execute(stmt)
            return session.get_one(ModelRow, model_id).to_entity()

    def find_model(self, name: str, batch: int, source_digest: str) -> Model | None:
        query = (
            select(ModelRow)
            .where(
                ModelRow.name == name,
                ModelRow.batch == batch,
                ModelRow.source_digest == source_digest,
            )
            .order_by(ModelRow.created_at.desc())
            .limit(1)
        )
        with self._unit.read() as session:
            row = session.scalars(query).first()
            return row.to_entity() if row else None

    def get_model(self, model_id: str) -> Model | None:
        with self._unit.read() as session:
            row = session.get(ModelRow, model_id)
            return row.to_entity() if row else None

    def list_models(self) -> list[Model]:
        with self._unit.read() as session:
            return [
                r.to_entity() for r in session.scalars(select(ModelRow).order_by(ModelRow.created_at))
            ]

    # -- jobs ------------------------------------------------------------------------

    def create_job(
        self,
        *,
        model_id: str,
        target: str,
        fingerprint_id: str,
        trials_budget: int,
        options: dict[str, Any],
        cache_hit: bool = False,
        state: JobState = JobState.QUEUED,
        runner: Runner | None = None,
    ) -> Job:
        """A new job; ``runner`` is the process running it (embedded jobs), whose heartbeat
        starts now."""
        now = utc_now()
        row = JobRow.new(model_id=model_id, target=target, fingerprint_id=fingerprint_id,
                         target_kind=target_kind_of(target), target_request=target, trials_budget=trials_budget,
                         options=options, now=now, state=state, cache_hit=cache_hit)
        if runner is not None:
            row.runner_host, row.runner_pid, row.runner_started_at = runner.host, runner.pid, runner.started_at
            row.heartbeat_at = now
        with self._unit.write(Changes.STATE) as session:
            session.add(row)
            session.flush()
            return row.to_entity()

    def update_job(
        self, job_id: str, *, expect_state: str | Iterable[str] | None = None, **fields: Any
    ) -> Job:
        """Set job fields in one statement.

        With ``expect_state`` the update applies only while the job is in that state (or
        one of those states), so two processes cannot both move a job out of it; the
        loser gets a RegistryError.
        """
        unknown = set(fields) - _JOB_FIELDS
        if unknown:
            raise TypeError(
                f"update_job() cannot set {sorted(unknown)}; settable: {sorted(_JOB_FIELDS)}"
            )
        states = None
        if expect_state is not None:
            states = [expect_state] if isinstance(expect_state, str) else list(expect_state)
        stmt = update(JobRow).where(JobRow.id == job_id)
        if states is not None:
            stmt = stmt.where(JobRow.state.in_(states))
        with self._unit.write(Changes.STATE) as session:
            changed = 1
            if fields:
                result = session.execute(
                    stmt.values(**fields).execution_options(synchronize_session=False)
                )
                changed = result.rowcount  # type: ignore[attr-defined]
            row = session.get(JobRow, job_id, populate_existing=True)
            if row is None:
                raise NotFound(
                    f"no job {quoted(job_id)} in the registry at {self.url}", "see `farm jobs`"
                )
            if not changed or (states is not None and not fields and row.state not in states):
                raise RegistryError(
                    f"job {job_id} is {row.state}, not {' or '.join(states or [])}; "
                    "it was not updated",
                    "another process changed it first; reload the job",
                )
            return row.to_entity()

    def get_job(self, job_id: str) -> Job:
        with self._unit.read() as session:
            row = session.get(JobRow, job_id)
            if row is None:
                raise NotFound(
                    f"no job {quoted(job_id)} in the registry at {self.url}", "see `farm jobs`"
                )
            return row.to_entity()

    def list_jobs(self, limit: int = 50, state: str | None = None, *, states: Iterable[str] = (),
                  model_name: str | None = None) -> list[Job]:
        """The newest jobs, in ``state`` or any of ``states`` (every state when neither is given),
        of models named ``model_name`` (any model when None)."""
        query = select(JobRow).order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit)
        wanted = {*states, *([state] if state is not None else [])}
        if wanted:
            query = query.where(JobRow.state.in_(sorted(wanted)))
        if model_name is not None:
            query = query.where(JobRow.model_id.in_(select(ModelRow.id).where(ModelRow.name == model_name)))
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]

    def unfinished_jobs_with_runner(self) -> list[Job]:
        """Embedded jobs not yet final: the ones whose runner may have died."""
        query = select(JobRow).where(JobRow.runner_host.is_not(None), JobRow.state.not_in(FINAL_STATES))
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]

    # -- artifacts -------------------------------------------------------------------

    def add_artifact(
        self,
        *,
        model_id: str,
        target: str,
        fingerprint_id: str,
        job_id: str | None,
        library: bytes,
        lib_format: str,
        latency: dict[str, float],
        untuned_latency_mean_ms: float | None,
        validation: dict[str, Any],
        tvm_version: str,
        software: dict[str, Any],
        weights_layout: str = "plain",
    ) -> Artifact:
        library = bytes(library)
        row = ArtifactRow(
            id="art-" + secrets.token_hex(6),
            model_id=model_id,
            target=target,
            fingerprint_id=fingerprint_id,
            job_id=job_id,
            library=library,
            sha256=hashlib.sha256(library).hexdigest(),
            size=len(library),
            lib_format=lib_format,
            latency_mean_ms=float(latency["mean_ms"]),
            latency_median_ms=float(latency["median_ms"]),
            latency_std_ms=float(latency["std_ms"]),
            untuned_latency_mean_ms=untuned_latency_mean_ms,
            validation=validation,
            validation_passed=bool(validation.get("passed", False)),
            tvm_version=tvm_version,
            software=software,
            created_at=utc_now(),
            weights_layout=weights_layout,
        )
        with self._unit.write(Changes.STATE) as session:
            session.add(row)
            session.flush()
            return row.to_entity()

    def find_artifact(
        self, model_id: str, target: str, fingerprint_id: str, tvm_version: str,
        weights_layout: str | None = None,
    ) -> Artifact | None:
        """The newest artifact that passed validation for exactly this scope, and was not
        found corrupt since (`invalidate_artifact`); of ``weights_layout`` only, if given."""
        conditions = [
            ArtifactRow.model_id == model_id,
            ArtifactRow.target == target,
            ArtifactRow.fingerprint_id == fingerprint_id,
            ArtifactRow.tvm_version == tvm_version,
            ArtifactRow.validation_passed.is_(True),
            ArtifactRow.invalidated_at.is_(None),
        ]
        if weights_layout is not None:
            conditions.append(ArtifactRow.weights_layout == weights_layout)
        query = (
            select(ArtifactRow)
            .where(*conditions)
            .order_by(ArtifactRow.created_at.desc(), ArtifactRow.id.desc())
            .limit(1)
        )
        with self._unit.read() as session:
            row = session.scalars(query).first()
            return row.to_entity() if row else None

    def invalidate_artifact(self, artifact_id: str, reason: str) -> Artifact:
        """Never offer this artifact again (its bytes are damaged, say); the row is kept."""
        with self._unit.write(Changes.STATE) as session:
            row = session.get(ArtifactRow, artifact_id)
            if row is None:
                raise _no_artifact(artifact_id, self.url)
            if row.invalidated_at is None:
                row.invalidated_at, row.invalid_reason = utc_now(), reason
            session.flush()
            return row.to_entity()

    def get_artifact(self, artifact_id: str) -> Artifact:
        with self._unit.read() as session:
            row = session.get(ArtifactRow, artifact_id)
            if row is None:
                raise _no_artifact(artifact_id, self.url)
            return row.to_entity()

    def get_artifact_library(self, artifact_id: str) -> bytes:
        with self._unit.read() as session:
            library = session.scalar(
                select(ArtifactRow.library).where(ArtifactRow.id == artifact_id)
            )
            if library is None:
                raise _no_artifact(artifact_id, self.url)
            return bytes(library)

    def list_artifacts(
        self,
        model_id: str | None = None,
        fingerprint_id: str | None = None,
        target: str | None = None,
        limit: int = 100,
    ) -> list[Artifact]:
        query = (
            select(ArtifactRow)
            .order_by(ArtifactRow.created_at.desc(), ArtifactRow.id.desc())
            .limit(limit)
        )
        if model_id is not None:
            query = query.where(ArtifactRow.model_id == model_id)
        if fingerprint_id is not None:
            query = query.where(ArtifactRow.fingerprint_id == fingerprint_id)
        if target is not None:
            query = query.where(ArtifactRow.target == target)
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]

    def counts(self) -> dict[str, int]:
        with self._unit.read() as session:
            return {
                table.name: session.scalar(select(func.count()).select_from(table)) or 0
                for table in Base.metadata.sorted_tables
            }

def _no_artifact(artifact_id: str, url: str) -> NotFound:
    return NotFound(
        f"no artifact {quoted(artifact_id)} in the registry at {url}", "see `farm registry ls`"
    )
