"""Plain, immutable values the registry store hands out: callers never touch ORM rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
    fingerprint_id: str
    state: str
    cache_hit: bool
    trials_budget: int
    trials_done: int
    options: dict[str, Any]
    error: str | None
    artifact_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


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
