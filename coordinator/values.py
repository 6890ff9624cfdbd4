"""The coordinator's calls in plain values: what clients and agents send and get back.

A bottom module: it imports nothing of the coordinator, so every part of it may use these.
The calls' errors are in coordinator.errors, the names it gives in coordinator.ids; what a submit
asks for is foundation.domain.submission's Submission, as every caller makes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.domain.shards import ShardState
from foundation.registry.entities import (
    Agent,
    Artifact,
    Job,
    Model,
    ShardLease,
    StoredShard,
    ValidationLease,
)

if TYPE_CHECKING:  # pragma: no cover
    from foundation.meta_schedule.warm import SeedTrace
    from foundation.registry.cost_models import StoredCostModel

@dataclass(frozen=True)
class Submitted:
    job: Job
    attached: bool


@dataclass(frozen=True)
class JobView:
    """A job with what its wire form shows besides the row: model, shards, artifact, errors."""

    job: Job
    model: Model | None
    shard_counts: dict[ShardState, int]
    failed_shards: list[StoredShard]
    artifact: Artifact | None
    trial_errors: int


@dataclass(frozen=True)
class AgentView:
    agent: Agent
    fingerprint_summary: str
    running_leases: list[tuple[str, str, int]]  # (job id, shard id, attempt)
    rpc_server_serving: bool


@dataclass(frozen=True)
class LeaseRef:
    job_id: str
    shard_id: str  # a shard id, or a validation id (`validation_id`)
    attempt: int


@dataclass(frozen=True)
class CancelLease:
    lease: LeaseRef
    reason: str


@dataclass(frozen=True)
class ReRegister:
    reason: str


@dataclass(frozen=True)
class TrackerAddress:
    """The TVM RPC tracker agents' RPC servers register with and measurements go through."""

    host: str
    port: int


@dataclass(frozen=True)
class Registration:
    agent: Agent
    heartbeat_interval: float
    lease_ttl: float
    tracker_host: str
    tracker_port: int
    tracker_key: str


@dataclass(frozen=True)
class OfferedTask:
    name: str
    weight: int
    flop: float
    mod_json: str  # tvm.ir.save_json of the task's IRModule
    workload_shash: str
    max_trials: int = 0  # its trials in the job's trial plan (a reused task's: its top-up); 0: none
    seeds: Sequence["SeedTrace"] = ()  # donor schedules to measure first, best first


@dataclass(frozen=True)
class ReportSize:
    records: int  # records per ReportRecords
    within_s: float  # the longest an agent keeps a measured record before reporting it


@dataclass(frozen=True)
class ShardOffer:
    lease: ShardLease
    tasks: list[OfferedTask]
    target: str
    max_trials_global: int
    max_trials_per_task: int
    num_trials_per_iter: int
    tracker_host: str
    tracker_port: int
    tracker_key: str
    seed: int
    report_size: ReportSize
    warm_records: list[tuple[str, str]]  # (workload shash, TuningRecord JSON)
    max_seeds_per_task: int = 0
    cost_model: "StoredCostModel | None" = None  # the fingerprint's, for this TVM version


@dataclass(frozen=True)
class ValidationOffer:
    lease: ValidationLease
    validation_id: str
    # Weight values for models whose weights are data (ONNX); empty: drawn from the specs.
    weight_values: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ShardOutcome:
    accepted: bool
    reason: str
    shard_state: ShardState | None = None


@dataclass(frozen=True)
class ValidationReport:
    """What an agent found: ``check`` and ``latency`` (foundation.runtime.validation values), or ``error``."""

    check: Any = None  # foundation.runtime.validation.ValidationResult
    latency: Any = None  # foundation.runtime.library_runner.Latency
    untuned_latency: Any = None
    error: str = ""
