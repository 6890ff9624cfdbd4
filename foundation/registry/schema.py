"""The registry's tables as SQLAlchemy ORM classes; migrations are checked against these.

Each row converts itself into the plain entity stores hand out (`to_entity()`, as mlflow's
rows do): an entity's fields are its row's columns of the same names, but for the few a
row's `to_entity` works out (states as enums, failures as values).
"""

from __future__ import annotations

import secrets
from dataclasses import fields
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, deferred, mapped_column

from foundation.clock import utc_now
from foundation.domain.jobs import JobState
from foundation.domain.runners import Runner
from foundation.domain.shards import ShardState
from foundation.domain.validations import ValidationState

from .entities import (
    Agent,
    Artifact,
    Fingerprint,
    Job,
    JobEvent,
    JobTask,
    Model,
    ShardFailure,
    StoredRecord,
    StoredShard,
    TuningLock,
    Validation,
)

# Every constraint gets a predictable name, so a later migration can drop or alter it by
# name on PostgreSQL and in SQLite batch mode alike.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always returned timezone-aware in UTC.

    SQLite has no time zones and hands back naive values; PostgreSQL's timestamptz hands
    back the session's zone. Callers compare and print these, so they get one form.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


Entity = TypeVar("Entity")
_FIELDS: dict[type, tuple[str, ...]] = {}


def _entity(entity_type: type[Entity], row: Base, **worked_out: Any) -> Entity:
    """An ``entity_type`` of the row's columns of the same names, and the fields ``worked_out``."""
    names = _FIELDS.get(entity_type)
    if names is None:
        names = _FIELDS[entity_type] = tuple(f.name for f in fields(entity_type))  # type: ignore[arg-type]
    return entity_type(**{n: worked_out[n] if n in worked_out else getattr(row, n) for n in names})


class FingerprintRow(Base):
    """One kind of hardware: tuning results are only reused on the same fingerprint."""

    __tablename__ = "fingerprints"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    summary: Mapped[str] = mapped_column(Text)
    details: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    def to_entity(self) -> Fingerprint:
        return _entity(Fingerprint, self)


class WorkloadRow(Base):
    """A tuning task's IRModule, as MetaSchedule's Workload serializes it."""

    __tablename__ = "workloads"
    __table_args__ = (Index("ix_workloads_shash", "shash"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # Structural hashes collide; the hash narrows the search, structural equality decides.
    shash: Mapped[str] = mapped_column(String(32))
    mod_json: Mapped[str] = mapped_column(Text)
    mod_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class TuningRecordRow(Base):
    """One schedule (a trace) of a workload on one fingerprint, target and TVM, with every
    measurement of it merged: the first one's times are its own (``run_secs``), later ones are
    `TuningMeasurementRow`s, and ``mean_sec`` is the mean over its valid measurements."""

    __tablename__ = "tuning_records"
    __table_args__ = (
        # "The best records of workload W in this scope" reads one range of this index, in
        # order, ties by id as TVM keeps them: no scan and no sort, however many records.
        Index(
            "ix_tuning_records_scope_mean",
            "workload_id",
            "fingerprint_id",
            "target",
            "tvm_version",
            "timing_context",
            "mean_sec",
            "id",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    fingerprint_id: Mapped[str] = mapped_column(ForeignKey("fingerprints.id"))
    target: Mapped[str] = mapped_column(Text)
    tvm_version: Mapped[str] = mapped_column(String(64))
    # The cache state the schedule was timed in (foundation.domain.timing_context, never auto):
    # times of two contexts do not compare, so it is part of the scope records are ranked in.
    timing_context: Mapped[str] = mapped_column(String(16), default="warm", server_default="warm")
    software: Mapped[dict] = mapped_column(JSON)
    trace: Mapped[str] = mapped_column(Text)
    args_info: Mapped[str | None] = mapped_column(Text)
    run_secs: Mapped[list | None] = mapped_column(JSON)
    # NULL for failed or invalid measurements, so "valid, fastest first" is one index scan.
    mean_sec: Mapped[float | None] = mapped_column(Double)
    job_id: Mapped[str | None] = mapped_column(String(64))
    # The same trace measured twice for the same scope is one record, whichever path
    # (live tuning, log import, a retried shard) brings it in; its measurements merge.
    record_digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # Measurements merged into this record (the first included), and how many of them ran.
    measurements: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    valid_measurements: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Which measurement ``run_secs`` is (tuning_records.measurement_digest): the same numbers
    # sent again (a retried report, a log exported and imported back) are not a new one.
    measurement_digest: Mapped[str | None] = mapped_column(String(64))

    def to_entity(self) -> StoredRecord:
        return _entity(StoredRecord, self)


class TuningMeasurementRow(Base):
    """A later measurement of a stored record's trace (another job, a re-measured seed, an
    imported log): kept whole, as history is training data, and merged into its record."""

    __tablename__ = "tuning_measurements"
    __table_args__ = (Index("ix_tuning_measurements_record_id", "record_id"),)

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    record_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), ForeignKey("tuning_records.id", ondelete="CASCADE"))
    run_secs: Mapped[list | None] = mapped_column(JSON)
    mean_sec: Mapped[float | None] = mapped_column(Double)
    job_id: Mapped[str | None] = mapped_column(String(64))
    measurement_digest: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class ModelRow(Base):
    """A user's model, identified by its graph structure and input shapes."""

    __tablename__ = "models"
    __table_args__ = (Index("ix_models_name_batch_source", "name", "batch", "source_digest"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    source: Mapped[str] = mapped_column(String(16))
    source_digest: Mapped[str] = mapped_column(String(64))
    batch: Mapped[int] = mapped_column(Integer)
    inputs: Mapped[list] = mapped_column(JSON)
    weights: Mapped[list] = mapped_column(JSON)
    num_parameters: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)

    def to_entity(self) -> Model:
        return _entity(Model, self)


class JobRow(Base):
    """A request to tune one model for one target on one fingerprint."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_created_at", "created_at"),
        # A submit looks for an unfinished job of the same model to attach to.
        Index("ix_jobs_model_id_state", "model_id", "state"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id"))
    # Canonical target JSON; empty while the job waits for a fingerprint to resolve it on.
    target: Mapped[str] = mapped_column(Text)
    # NULL while the job waits (queued) for an agent of its target kind to register.
    fingerprint_id: Mapped[str | None] = mapped_column(ForeignKey("fingerprints.id"))
    target_kind: Mapped[str] = mapped_column(String(32), default="", server_default="")
    # The target as the user spelled it ("cuda"), kept to resolve it once a fingerprint exists.
    target_request: Mapped[str] = mapped_column(Text, default="", server_default="")
    # One human sentence on what the job does or waits for (farm.proto Job.status).
    status: Mapped[str] = mapped_column(Text, default="", server_default="")
    # Groups the per-fingerprint jobs one submit started.
    parent_request: Mapped[str | None] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(16))
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    trials_budget: Mapped[int] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    options: Mapped[dict] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    # No foreign key: artifacts already point at their job, and a cycle of foreign keys
    # would need deferred constraints on PostgreSQL for no gain.
    artifact_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The process running an embedded job (NULL for a coordinator's jobs): a job whose runner
    # is gone is failed on the next read (foundation.domain.runners). The start time tells a
    # live runner from another process that was given its pid later.
    runner_host: Mapped[str | None] = mapped_column(String(256))
    runner_pid: Mapped[int | None] = mapped_column(Integer)
    runner_started_at: Mapped[float | None] = mapped_column(Double)
    # Moved every few seconds by the runner; what readers on other hosts judge it by.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set by `farm cancel` from another process; the runner's heartbeat reads it and stops.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @classmethod
    def new(cls, *, model_id: str, target: str, fingerprint_id: str | None, target_kind: str, target_request: str,
            trials_budget: int, options: dict[str, Any], now: datetime, state: JobState = JobState.QUEUED,
            cache_hit: bool = False, status: str = "", parent_request: str | None = None) -> JobRow:
        """A new job's row: the one place a job is made, by the registry (an embedded job, a registry hit)
        and by a coordinator's cluster store alike."""
        return cls(id="job-" + secrets.token_hex(5), model_id=model_id, target=target, fingerprint_id=fingerprint_id,
                   target_kind=target_kind, target_request=target_request, status=status,
                   parent_request=parent_request, state=JobState(state).value, cache_hit=cache_hit,
                   trials_budget=trials_budget, trials_done=0, options=options, created_at=now)

    def to_entity(self) -> Job:
        return _entity(Job, self, state=JobState(self.state), runner=_runner(self))


class ArtifactRow(Base):
    """A compiled, validated library for one model, target, fingerprint and TVM version."""

    __tablename__ = "artifacts"
    __table_args__ = (
        Index(
            "ix_artifacts_lookup",
            "model_id",
            "target",
            "fingerprint_id",
            "tvm_version",
            "created_at",
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id"))
    target: Mapped[str] = mapped_column(Text)
    fingerprint_id: Mapped[str] = mapped_column(ForeignKey("fingerprints.id"))
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"))
    # Deferred: listings and lookups must not pull megabytes of shared library per row.
    library: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    lib_format: Mapped[str] = mapped_column(String(16))
    latency_mean_ms: Mapped[float] = mapped_column(Double)
    latency_median_ms: Mapped[float] = mapped_column(Double)
    latency_std_ms: Mapped[float] = mapped_column(Double)
    untuned_latency_mean_ms: Mapped[float | None] = mapped_column(Double)
    validation: Mapped[dict] = mapped_column(JSON)
    # Copied out of `validation` so lookups can filter on it in SQL.
    validation_passed: Mapped[bool] = mapped_column(Boolean)
    tvm_version: Mapped[str] = mapped_column(String(64))
    software: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    # Set when the stored bytes no longer match sha256 (or cannot be loaded): never a hit again.
    invalidated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    invalid_reason: Mapped[str | None] = mapped_column(Text)
    # "plain" or "prepacked" (foundation.domain.weights_layout): a hit is of the form asked for.
    weights_layout: Mapped[str] = mapped_column(String(16), default="plain", server_default="plain")

    def to_entity(self) -> Artifact:
        """Its metadata; the library stays in the database (`RegistryStore.get_artifact_library`)."""
        return _entity(Artifact, self)


class ArtifactPinRow(Base):
    """An artifact a prune must keep (`farm registry pin`): a library this registry's users run.

    A table of its own, not a column of artifacts: a pin is this registry's decision, and sync
    and packs copy artifacts column by column into other registries, where it would not hold.
    """

    __tablename__ = "artifact_pins"

    # No ON DELETE: while pinned, the artifact cannot be deleted by anyone.
    artifact_id: Mapped[str] = mapped_column(ForeignKey("artifacts.id"), primary_key=True)
    pinned_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class TuningLockRow(Base):
    """Who tunes one (model, batch, target, fingerprint, TVM) right now: one row per scope.

    An embedded submit inserts the row before tuning and deletes it when its job ends; a
    second submit of the same scope finds the row and waits. A holder that died leaves the
    row behind; it is taken over once the holder's runner is judged gone, by the rule that
    fails its job (foundation.domain.runners).
    """

    __tablename__ = "tuning_locks"

    # sha256 of the scope (foundation.job_driver.tuning_lock.scope_key).
    scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text)
    # NULL until the holder has created its job (it loads the model first).
    job_id: Mapped[str | None] = mapped_column(String(64))
    runner_host: Mapped[str] = mapped_column(String(256))
    runner_pid: Mapped[int] = mapped_column(Integer)
    runner_started_at: Mapped[float] = mapped_column(Double)
    acquired_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_entity(self) -> TuningLock:
        return _entity(TuningLock, self, runner=_runner(self))


def _runner(row: "JobRow | TuningLockRow") -> Runner | None:
    return None if row.runner_host is None else Runner(row.runner_host, row.runner_pid, row.runner_started_at)


# -- the distributed mode: agents, job plans, shards, events, validations ---------------------


class AgentRow(Base):
    """A registered device agent: one box of one fingerprint, able to tune some target kinds."""

    __tablename__ = "agents"
    __table_args__ = (Index("ix_agents_state_fingerprint_id", "state", "fingerprint_id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint_id: Mapped[str] = mapped_column(ForeignKey("fingerprints.id"))
    target_kinds: Mapped[list] = mapped_column(JSON)
    hostname: Mapped[str] = mapped_column(String(256))
    address: Mapped[str] = mapped_column(String(256))
    tvm_version: Mapped[str] = mapped_column(String(64))
    rpc_key: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    details: Mapped[dict] = mapped_column(JSON)

    def to_entity(self) -> Agent:
        return _entity(Agent, self, target_kinds=list(self.target_kinds))


class JobTaskRow(Base):
    """One tuning task of a job's plan: a TIR function of the model and its trial cap."""

    __tablename__ = "job_tasks"
    __table_args__ = (
        PrimaryKeyConstraint("job_id", "index"),
        UniqueConstraint("job_id", "name"),
    )

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(256))
    weight: Mapped[int] = mapped_column(Integer)
    flop: Mapped[float] = mapped_column(Double)
    workload_shash: Mapped[str] = mapped_column(String(32))
    mod_json: Mapped[str] = mapped_column(Text)
    # Committed with the plan, so reported records resolve their workload without a lookup
    # by structural hash (which can collide).
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    trials_budget: Mapped[int] = mapped_column(Integer)

    def to_entity(self) -> JobTask:
        return _entity(JobTask, self)


class ShardRow(Base):
    """Some of a job's tasks, leased to one agent at a time (foundation.domain.shards.Shard)."""

    __tablename__ = "shards"
    __table_args__ = (
        UniqueConstraint("job_id", "index"),
        # Claiming scans pending shards; a job's rollup reads its shards by state.
        Index("ix_shards_state_job_id", "state", "job_id"),
        Index("ix_shards_agent_id_state", "agent_id", "state"),
    )

    id: Mapped[str] = mapped_column(String(96), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    # Leases granted so far; while leased, the current lease's attempt id.
    attempt: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"))
    leased_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the lease lapses if its agent never heartbeats again (Lease.expires_at); each
    # heartbeat moves the real deadline, which expiry computes from the agent's last beat.
    heartbeat_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime)
    task_indexes: Mapped[list] = mapped_column(JSON)
    # The split's cost estimate: the costliest pending shard is leased first.
    cost: Mapped[float] = mapped_column(Double)
    trials_budget: Mapped[int] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer)
    failures: Mapped[list] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_entity(self, task_names: list[str]) -> StoredShard:
        """The shard, given the names of its tasks (rows of their own: JobTaskRow)."""
        return _entity(StoredShard, self, state=ShardState(self.state), task_indexes=list(self.task_indexes),
                       task_names=task_names, failures=[ShardFailure.from_json(f) for f in self.failures])


class JobEventRow(Base):
    """One thing that happened to a job; the id is the sequence WatchJob resumes after."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_entity(self) -> JobEvent:
        return _entity(JobEvent, self, sequence=self.id)


class ValidationRow(Base):
    """A built library waiting for (or checked by) an agent of the job's fingerprint."""

    __tablename__ = "validations"
    __table_args__ = (Index("ix_validations_state", "state"),)

    job_id: Mapped[str] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    state: Mapped[str] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"))
    leased_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Deferred: listing validations must not pull the libraries.
    library: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    library_sha256: Mapped[str] = mapped_column(String(64))
    lib_format: Mapped[str] = mapped_column(String(16))
    # The untuned build, run on the device as the reference; NULL when outputs are sent instead.
    reference_library: Mapped[bytes | None] = deferred(mapped_column(LargeBinary))
    inputs: Mapped[list] = mapped_column(JSON)
    weights: Mapped[list] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    runs: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer)
    result: Mapped[dict | None] = mapped_column(JSON)
    failures: Mapped[list] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    def to_entity(self) -> Validation:
        """Its metadata; the libraries come with a lease (`ClusterStore.validations.claim_validation`)."""
        return _entity(Validation, self, state=ValidationState(self.state),
                       failures=[ShardFailure.from_json(f) for f in self.failures])


class CostModelRow(Base):
    """A cost model trained on one fingerprint's records for one TVM version: one row each, replaced
    as it learns (foundation.meta_schedule.warm.cost_models writes and reads the blob)."""

    __tablename__ = "cost_models"
    __table_args__ = (UniqueConstraint("fingerprint_id", "tvm_version", "kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint_id: Mapped[str] = mapped_column(ForeignKey("fingerprints.id"))
    tvm_version: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # "xgb"
    # The newest tuning record it learned from: the next refresh adds only later ones.
    last_record_id: Mapped[int] = mapped_column(BigInteger)
    samples: Mapped[int] = mapped_column(Integer)
    workloads: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    # Deferred: the blob holds every training sample's features (megabytes for a busy fingerprint).
    blob: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
