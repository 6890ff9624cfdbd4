"""Plain entities from the cluster's ORM rows, and the JSON kept of failed attempts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from foundation.domain.shards import Shard, ShardState
from foundation.domain.validations import Validation as DomainValidation
from foundation.domain.validations import ValidationState
from foundation.registry.entities import Agent, JobEvent, JobTask, ShardFailure, StoredShard, Validation
from foundation.registry.schema import AgentRow, JobEventRow, JobTaskRow, ShardRow, ValidationRow


def _shard_event(shard: StoredShard, reason: str | None = None) -> dict[str, Any]:
    return {
        "shard_id": shard.id,
        "state": shard.state.value,
        "attempt": shard.attempt,
        "agent_id": shard.agent_id or "",
        "reason": reason or "",
    }

def _failure_json(attempt: int, agent_id: str | None, reason: str, at: datetime) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "agent_id": agent_id,
        "reason": reason,
        "at": at.astimezone(timezone.utc).isoformat(),
    }


def _failures_json(old: Sequence[ShardFailure], new: Shard | DomainValidation, now: datetime) -> list[dict[str, Any]]:
    """The stored failures plus the ones foundation.domain appended, stamped ``now``."""
    kept = [
        _failure_json(f.attempt, f.agent_id, f.reason, f.at or now) for f in old
    ]
    added = [_failure_json(f.attempt, f.agent_id, f.reason, now) for f in new.failures[len(old) :]]
    return kept + added


def _failures(values: list[dict[str, Any]]) -> list[ShardFailure]:
    return [
        ShardFailure(
            attempt=v["attempt"],
            agent_id=v.get("agent_id"),
            reason=v["reason"],
            at=datetime.fromisoformat(v["at"]) if v.get("at") else None,
        )
        for v in values
    ]


def _agent(row: AgentRow) -> Agent:
    return Agent(
        id=row.id,
        fingerprint_id=row.fingerprint_id,
        target_kinds=list(row.target_kinds),
        hostname=row.hostname,
        address=row.address,
        tvm_version=row.tvm_version,
        rpc_key=row.rpc_key,
        state=row.state,
        registered_at=row.registered_at,
        last_heartbeat_at=row.last_heartbeat_at,
        details=row.details,
    )


def _stored_shard(row: ShardRow, task_names: list[str]) -> StoredShard:
    return StoredShard(
        id=row.id,
        job_id=row.job_id,
        index=row.index,
        state=ShardState(row.state),
        attempt=row.attempt,
        agent_id=row.agent_id,
        leased_at=row.leased_at,
        heartbeat_deadline=row.heartbeat_deadline,
        task_indexes=list(row.task_indexes),
        task_names=task_names,
        cost=row.cost,
        trials_budget=row.trials_budget,
        trials_done=row.trials_done,
        failures=_failures(row.failures),
        updated_at=row.updated_at,
    )


def _job_task(row: JobTaskRow) -> JobTask:
    return JobTask(
        job_id=row.job_id,
        index=row.index,
        name=row.name,
        weight=row.weight,
        flop=row.flop,
        workload_shash=row.workload_shash,
        mod_json=row.mod_json,
        workload_id=row.workload_id,
        trials_budget=row.trials_budget,
    )


def _event(row: JobEventRow) -> JobEvent:
    return JobEvent(
        sequence=row.id, job_id=row.job_id, kind=row.kind, payload=row.payload, created_at=row.created_at
    )


def _validation(row: ValidationRow) -> Validation:
    return Validation(
        job_id=row.job_id,
        state=ValidationState(row.state),
        attempt=row.attempt,
        agent_id=row.agent_id,
        leased_at=row.leased_at,
        library_sha256=row.library_sha256,
        lib_format=row.lib_format,
        inputs=row.inputs,
        weights=row.weights,
        seed=row.seed,
        runs=row.runs,
        warmup=row.warmup,
        result=row.result,
        failures=_failures(row.failures),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
