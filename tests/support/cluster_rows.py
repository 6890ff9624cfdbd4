"""Rows of a ClusterStore for tests: agents, planned and validating jobs, records, at fixed times."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from coordinator.cluster_store import ClusterStore
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.registry import NewRecord
from foundation.registry.entities import PlannedTask

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.store import RegistryStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
TTL = 30.0
GPU = "gpu-aaaa"
OTHER_GPU = "gpu-bbbb"
CUDA_TARGET = '{"kind":"cuda","arch":"sm_86"}'


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def agent_of(cluster: ClusterStore, fingerprint_id: str = GPU, kinds=("cuda", "llvm"), now=T0, **kw):  # type: ignore[no-untyped-def]
    return cluster.agents.register_agent(
        fingerprint_id=fingerprint_id, target_kinds=list(kinds), hostname="box", address="10.0.0.1:1",
        tvm_version="0.27.0", rpc_key=f"farm-{fingerprint_id}", details={}, now=now, **kw,
    )


def tasks_of(count: int) -> list[PlannedTask]:
    return [
        PlannedTask(f"task{i}", weight=1, flop=1e6 * (i + 1), workload_shash=str(1000 + i),
                    mod_json=f'["{1000 + i}","mod{i}"]', trials_budget=8)
        for i in range(count)
    ]


def planned_job(cluster: ClusterStore, tasks: int = 2, shards: int = 2, fingerprint_id=GPU, kind="cuda"):  # type: ignore[no-untyped-def]
    job, _ = cluster.jobs.create_job(
        model_id="model-1", target_request=kind, target_kind=kind, target=CUDA_TARGET,
        fingerprint_id=fingerprint_id, trials_budget=8 * tasks, options={"seed": 1}, now=T0,
    )
    planned = tasks_of(tasks)
    split = split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop) for t in planned], shards, 8 * tasks)
    cluster.plans.add_job_plan(job.id, planned, split, T0)
    return job


def validating_job(cluster: ClusterStore, store):  # type: ignore[no-untyped-def]
    """A one-shard job whose shard is done and built: validating, its validation not made yet.
    Returns (job, the agent that tuned it)."""
    job = planned_job(cluster, tasks=1, shards=1)
    agent = agent_of(cluster)
    lease = cluster.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)
    cluster.leases.complete_shard(lease.shard.id, 1, agent.id, at(2))
    store.update_job(job.id, expect_state="running", state="building")
    store.update_job(job.id, expect_state="building", state="validating")
    return job, agent


def records_of(lease, traces, fingerprint_id=GPU) -> list[NewRecord]:  # type: ignore[no-untyped-def]
    workload = lease.tasks[0].workload_id
    return [
        NewRecord(workload_id=workload, fingerprint_id=fingerprint_id, target=CUDA_TARGET,
                  tvm_version="0.27.0", trace=f'"{trace}"', run_secs=[0.001])
        for trace in traces
    ]


@contextmanager
def registry_of(url: str) -> Iterator[tuple["RegistryStore", ClusterStore]]:
    """The registry a coordinator writes, read directly (what a restarted coordinator finds)."""
    from foundation.registry.store import RegistryStore

    store = RegistryStore(url)
    try:
        yield store, ClusterStore(store)
    finally:
        store.dispose()
