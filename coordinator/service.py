"""The coordinator's parts, built once: jobs, agents, leases and validations over the registry, no gRPC.

Everything the coordinator knows is in SQL (RegistryStore, ClusterStore), so a restarted
coordinator carries on (coordinator.housekeeping); what is kept in memory only speeds things up.

The Coordinator composes one part per kind of call (coordinator.calls: clients, agents, shard
leases, reports, validations) and the jobs' recipe with their tuning on agents (coordinator.job_site),
each given what it needs, and the objects they share. It adds no calls of its own: the
servicer (coordinator.servicer) calls the parts, and the server (coordinator.server) builds
the background tick (coordinator.housekeeping) over the same jobs. coordinator.values holds
the plain values the parts take and return, coordinator.errors their errors.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from coordinator.calls.agents import AgentCalls
from coordinator.calls.client import ClientCalls
from coordinator.calls.packs import PackCalls
from coordinator.calls.reports import ReportCalls
from coordinator.calls.shards import ShardCalls
from coordinator.calls.validations import ValidationCalls
from coordinator.cluster_store import ClusterStore
from coordinator.fleet import (
    GroupCommit,
    LiveAgents,
    ProgressEvents,
    ReportPolicy,
    ReportSizing,
    UnreadReport,
    ingest_reports,
)
from coordinator.hints import RpcServerFlags, TaskProgress, WorkloadJson
from coordinator.job_site import CoordinatorJobs
from coordinator.model_cache import ModelCache
from coordinator.values import TrackerAddress
from coordinator.waiting_jobs import WaitingJobs
from foundation.clock import utc_now
from foundation.domain.leases import DEFAULT_MAX_ATTEMPTS
from foundation.registry.store import RegistryStore


@dataclass(frozen=True)
class CoordinatorSettings:
    data_dir: Path
    heartbeat_interval: float = 5.0
    # A few intervals, so one late beat is not fatal.
    lease_ttl: float = 30.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # How large agents' reports are (coordinator.fleet.report_sizing).
    report_policy: ReportPolicy = ReportPolicy()
    # Records per task handed to an agent for its warm start.
    warm_records_per_task: int = 32
    # How long an idle agent waits before asking for work again.
    idle_retry_after: float = 1.0


class Coordinator:
    """Jobs, agents, shard and validation leases: one part per kind of call (coordinator.calls)
    and its jobs (coordinator.job_site), each given what it needs; callers call the
    parts themselves (`client_calls.submit`, `shard_calls.claim_shard`)."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, tracker_address: str,
                 settings: CoordinatorSettings,
                 ingest: Callable[[list[UnreadReport]], list | Future] | None = None):
        """``ingest`` reads and commits a group of reports, returning their answers or a
        Future of them (`IngestProcess.submit`, say); by default this process does it
        (coordinator.fleet.report_ingest)."""
        from foundation.hardware.versions import tvm_version
        from foundation.rpc.tracker import parse_tracker_address

        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.tracker_host, self.tracker_port = parse_tracker_address(tracker_address)
        tracker = TrackerAddress(self.tracker_host, self.tracker_port)
        self.tvm_version = version = tvm_version()
        self.wake = wake = threading.Event()  # set when a tick should come early
        self._draining = draining = threading.Event()

        # What the parts share, each in an object of its own.
        self.live = LiveAgents(cluster, lambda: store.unit_of_work.state_version,
                               store.unit_of_work.lease_version)
        self.report_sizing = ReportSizing(settings.report_policy)
        self.report_commits = GroupCommit("farm-reports", ingest or functools.partial(ingest_reports, cluster))
        self.claim_commits = GroupCommit(
            "farm-claims", lambda claims: cluster.leases.claim_shards(claims, utc_now(), settings.lease_ttl))
        models = ModelCache(settings.data_dir)
        progress = TaskProgress(cluster)
        workloads = WorkloadJson()
        rpc_servers = RpcServerFlags()
        progress_events = ProgressEvents()

        self.jobs = jobs = CoordinatorJobs(store, cluster, models, workloads, version, wake, settings.data_dir)
        self.pack_calls = PackCalls(store, data_dir=settings.data_dir,
                                    about={"command": "farm coordinator (ExportPack)", "cpu": "",
                                           "tvm_version": version})
        self.client_calls = ClientCalls(store, cluster, models, progress, rpc_servers,
                                        WaitingJobs(store, cluster, jobs.fail), data_dir=settings.data_dir,
                                        tvm_version=version, draining=draining, wake=wake)
        self.agent_calls = AgentCalls(
            store, cluster, self.live, rpc_servers, tvm_version=version, tracker=tracker,
            heartbeat_interval=settings.heartbeat_interval, lease_ttl=settings.lease_ttl,
            max_attempts=settings.max_attempts, wake=wake)
        self.shard_calls = ShardCalls(
            store, cluster, self.live, self.claim_commits, workloads, progress_events, self.report_sizing,
            tvm_version=version, tracker=tracker, warm_records_per_task=settings.warm_records_per_task,
            max_attempts=settings.max_attempts, draining=draining, wake=wake)
        self.report_calls = ReportCalls(store, cluster, self.live, self.report_commits, progress_events, progress,
                                        self.report_sizing, tvm_version=version)
        self.validation_calls = ValidationCalls(store, cluster, self.live, models, settle=jobs.settle,
                                                max_attempts=settings.max_attempts, draining=draining)

    @property
    def draining(self) -> bool:
        """Set while the server drains: no new jobs, leases or validations are handed out."""
        return self._draining.is_set()

    @draining.setter
    def draining(self, value: bool) -> None:
        (self._draining.set if value else self._draining.clear)()

    def close(self) -> None:
        self.claim_commits.close()
        self.report_commits.close()
