"""Plain, immutable values the registry store hands out: callers never touch ORM rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, NamedTuple

from foundation.domain import validations as validation_rules
from foundation.domain.job_rollup import JobRollup
from foundation.domain.jobs import JobState
from foundation.domain.leases import AttemptFailure
from foundation.domain.runners import Runner
from foundation.domain.shards import Shard, ShardState
from foundation.domain.timing_context import TimingContext
from foundation.domain.validations import ValidationState

# What a record says it was timed in where nothing says otherwise: every record before contexts
# were kept, a user's TVM log (TVM's runner times back to back), a GPU's.
WARM_CONTEXT = TimingContext.WARM.value


@dataclass(frozen=True)
class Fingerprint:
    id: str
    kind: str
    summary: str
    details: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    source: str
    source_digest: str
    batch: int
    inputs: list[dict[str, Any]]
    weights: list[dict[str, Any]]
    num_parameters: int
    created_at: datetime


@dataclass(frozen=True)
class Job:
    id: str
    model_id: str
    target: str
    # None while the job waits for an agent of its target kind (distributed mode only).
    fingerprint_id: str | None
    state: JobState
    cache_hit: bool
    trials_budget: int
    trials_done: int
    options: dict[str, Any]
    error: str | None
    artifact_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    target_kind: str = ""
    target_request: str = ""
    status: str = ""
    parent_request: str | None = None
    # The process running an embedded job; None for a coordinator's jobs.
    runner: Runner | None = None
    heartbeat_at: datetime | None = None
    cancel_requested_at: datetime | None = None


@dataclass(frozen=True)
class Artifact:
    """A compiled library's metadata; the bytes come from `RegistryStore.get_artifact_library`."""

    id: str
    model_id: str
    target: str
    fingerprint_id: str
    job_id: str | None
    sha256: str
    size: int
    lib_format: str
    latency_mean_ms: float
    latency_median_ms: float
    latency_std_ms: float
    untuned_latency_mean_ms: float | None
    validation: dict[str, Any]
    tvm_version: str
    software: dict[str, Any]
    created_at: datetime
    invalidated_at: datetime | None = None
    invalid_reason: str | None = None
    weights_layout: str = "plain"  # or "prepacked", "prepacked-nchwc": the library rearranges plain weights at load

    @property
    def speed(self) -> dict[str, Any] | None:
        """Its validation's timing against the untuned build (foundation.domain.untuned_speed), with
        the threads it chose; None where the untuned build was not timed."""
        return (self.validation or {}).get("speed")


@dataclass(frozen=True)
class TuningLock:
    """Who holds the tuning of one scope (foundation.registry.schema.TuningLockRow)."""

    scope: str
    description: str
    job_id: str | None
    runner: Runner
    acquired_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True)
class NewRecord:
    """A measured schedule on its way into the registry.

    ``trace`` and ``args_info`` are JSON text in one canonical spelling (see
    `tvm_database.canonical_json`): the record digest is taken over them, so two spellings
    of one trace would be stored twice.
    """

    workload_id: int
    fingerprint_id: str
    target: str
    tvm_version: str
    trace: str
    run_secs: list[float] | None
    args_info: str | None = None
    software: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None
    # MetaSchedule also rejects a trace with no instruction before post-processing;
    # only TVM can tell, so the caller says.
    trace_valid: bool = True
    # The cache state it was timed in (foundation.domain.timing_context): records are ranked only
    # beside others timed in the same one.
    timing_context: str = WARM_CONTEXT


class Measurement(NamedTuple):
    """One measurement of a stored record: its run times, their mean (None when it failed), and
    the job that measured it (None: imported, or measured by no job). A tuple as well, so it
    unpacks as (run_secs, mean_sec, job_id)."""

    run_secs: list[float] | None
    mean_sec: float | None
    job_id: str | None


@dataclass(frozen=True)
class StoredRecord:
    id: int
    workload_id: int
    fingerprint_id: str
    target: str
    tvm_version: str
    software: dict[str, Any]
    trace: str
    args_info: str | None
    run_secs: list[float] | None
    mean_sec: float | None
    job_id: str | None
    record_digest: str
    created_at: datetime
    # Measurements merged into it (mean_sec is over the valid ones; run_secs is the first's).
    measurements: int = 1
    valid_measurements: int = 0
    timing_context: str = WARM_CONTEXT


# -- the distributed mode ---------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    id: str
    fingerprint_id: str
    target_kinds: list[str]
    hostname: str
    address: str
    tvm_version: str
    rpc_key: str
    state: str  # "active" or "lost"
    registered_at: datetime
    last_heartbeat_at: datetime
    details: dict[str, Any]


@dataclass(frozen=True)
class PlannedTask:
    """A tuning task on its way into a job's plan (foundation.compile.TuningTask, flattened)."""

    name: str
    weight: int
    flop: float
    workload_shash: str
    mod_json: str
    trials_budget: int  # the per-task trial cap


@dataclass(frozen=True)
class JobTask:
    job_id: str
    index: int
    name: str
    weight: int
    flop: float
    workload_shash: str
    mod_json: str
    workload_id: int
    trials_budget: int


@dataclass(frozen=True)
class ShardFailure:
    """A failed attempt of a shard or a validation, as its row's failures column keeps it."""

    attempt: int
    agent_id: str | None
    reason: str
    at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "agent_id": self.agent_id,
            "reason": self.reason,
            "at": None if self.at is None else self.at.astimezone(timezone.utc).isoformat(),
        }

    @staticmethod
    def from_json(value: dict[str, Any]) -> "ShardFailure":
        return ShardFailure(
            attempt=value["attempt"],
            agent_id=value.get("agent_id"),
            reason=value["reason"],
            at=datetime.fromisoformat(value["at"]) if value.get("at") else None,
        )


def failures_json(
    stored: Sequence[ShardFailure], decided: Sequence[AttemptFailure], now: datetime
) -> list[dict[str, Any]]:
    """What a row's failures column keeps: the ``stored`` failures, and the ones foundation.domain
    appended to them in ``decided`` (a Shard's or Validation's failures), stamped ``now``."""
    kept = [replace(f, at=f.at or now) for f in stored]
    added = [ShardFailure(f.attempt, f.agent_id, f.reason, now) for f in decided[len(stored) :]]
    return [f.to_json() for f in kept + added]


@dataclass(frozen=True)
class StoredShard:
    """A shard as the registry keeps it; `as_shard()` is the value foundation.domain.shards checks."""

    id: str
    job_id: str
    index: int
    state: ShardState
    attempt: int
    agent_id: str | None
    leased_at: datetime | None
    heartbeat_deadline: datetime | None
    task_indexes: list[int]
    task_names: list[str]
    cost: float
    trials_budget: int
    trials_done: int
    failures: list[ShardFailure]
    updated_at: datetime

    def as_shard(self) -> Shard:
        return Shard(
            id=self.id,
            job_id=self.job_id,
            task_names=tuple(self.task_names),
            cost=self.cost,
            trial_budget=self.trials_budget,
            state=self.state,
            attempt=self.attempt,
            agent_id=self.agent_id,
            # foundation.domain.shard_leases keeps time as epoch seconds.
            leased_at=None if self.leased_at is None else self.leased_at.timestamp(),
            failures=tuple(AttemptFailure(f.attempt, f.agent_id, f.reason) for f in self.failures),
        )

    def changed_event(self, reason: str | None = None) -> dict[str, Any]:
        """The payload of the shard_changed event that says the shard is now as it is."""
        return {
            "shard_id": self.id,
            "state": self.state.value,
            "attempt": self.attempt,
            "agent_id": self.agent_id or "",
            "reason": reason or "",
        }


@dataclass(frozen=True)
class ShardLease:
    """What an agent gets when it claims a shard: the shard, its job and the tasks to tune."""

    shard: StoredShard
    job: Job
    tasks: list[JobTask]
    expires_at: datetime

    @property
    def attempt(self) -> int:
        return self.shard.attempt

    @property
    def target(self) -> str:
        return self.job.target


@dataclass(frozen=True)
class ShardClaim:
    """An agent asking for a shard to tune."""

    agent_id: str
    fingerprint_id: str
    target_kinds: tuple[str, ...]


@dataclass(frozen=True)
class ReportedBatch:
    """What one report under a lease carries into the registry."""

    shard_id: str
    attempt: int
    agent_id: str
    records: Sequence[NewRecord]
    trials: int  # candidates measured, with or without a record worth keeping
    events: Sequence[tuple[str, dict[str, Any]]] = ()  # (kind, payload) for the job, if kept


@dataclass(frozen=True)
class RecordReport:
    """The answer to a batch of records reported under a lease."""

    accepted: bool
    reason: str | None  # why not accepted
    stored: int  # records new to the registry
    duplicates: int  # records the registry already had


@dataclass(frozen=True)
class ShardChange:
    """The answer to completing or failing a lease, and what it means for the job."""

    accepted: bool
    reason: str | None  # why not accepted (a stale attempt)
    shard: StoredShard
    rollup: JobRollup


@dataclass(frozen=True)
class JobEvent:
    sequence: int
    job_id: str
    kind: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class Validation:
    """A validation's metadata; the libraries come with `ValidationLease`. `as_validation()` is
    the value foundation.domain.validations decides on."""

    job_id: str
    state: ValidationState
    attempt: int
    agent_id: str | None
    leased_at: datetime | None
    library_sha256: str
    lib_format: str
    inputs: list[dict[str, Any]]
    weights: list[dict[str, Any]]
    seed: int
    runs: int
    warmup: int
    result: dict[str, Any] | None
    failures: list[ShardFailure]
    created_at: datetime
    updated_at: datetime

    def as_validation(self) -> validation_rules.Validation:
        return validation_rules.Validation(
            job_id=self.job_id,
            state=self.state,
            attempt=self.attempt,
            agent_id=self.agent_id,
            # foundation.domain keeps time as epoch seconds.
            leased_at=None if self.leased_at is None else self.leased_at.timestamp(),
            failures=tuple(AttemptFailure(f.attempt, f.agent_id, f.reason) for f in self.failures),
        )


@dataclass(frozen=True)
class ValidationLease:
    validation: Validation
    job: Job
    library: bytes
    reference_library: bytes | None

    @property
    def attempt(self) -> int:
        return self.validation.attempt


@dataclass(frozen=True)
class ValidationChange:
    """The answer to a validation report: dropped when its attempt is stale."""

    accepted: bool
    reason: str | None
    validation: Validation
