"""The coordinator: jobs, agents, leases and validations over the registry, with no gRPC in sight.

Every method takes and returns plain values; coordinator/servicer.py maps them to the wire.
Everything the coordinator knows is in SQL (RegistryStore, ClusterStore), so a restarted
coordinator carries on: `tick` re-plans jobs left queued, rebuilds jobs left building, and
settles validations reported while it was away. What is kept in memory only speeds things up.

The Coordinator is composed of one part per module: client_calls (submit, jobs, agents),
agent_calls (registration, heartbeats, leases and reports) and housekeeping (the background
tick); calls holds the plain values they take and return, and their errors.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from coordinator.agent_calls import AgentCalls
from coordinator.calls import (
    AgentRefused,
    AgentView,
    CancelLease,
    InvalidRequest,
    JobView,
    LeaseRef,
    OnnxUpload,
    ReRegister,
    SubmitSpec,
    Unavailable,
    ValidationReport,
    utc_now,
)
from coordinator.client_calls import ClientCalls
from coordinator.cluster_store import ClusterStore
from coordinator.fleet import report_ingest
from coordinator.fleet.group_commit import GroupCommit
from coordinator.fleet.live_agents import LiveAgents
from coordinator.fleet.progress_events import ProgressEvents
from coordinator.fleet.report_ingest import UnreadReport
from coordinator.fleet.report_sizing import DEFAULT_JITTER, ReportSizing
from coordinator.housekeeping import Housekeeping
from coordinator.job_work import BackgroundWorker, ModelCache
from foundation.domain.shards import DEFAULT_MAX_ATTEMPTS
from foundation.registry.store import RegistryStore

# Names the servicer and the server import from here; the other values of the calls are
# in coordinator.calls.
__all__ = [
    "AgentRefused",
    "AgentView",
    "CancelLease",
    "Coordinator",
    "CoordinatorSettings",
    "InvalidRequest",
    "JobView",
    "LeaseRef",
    "OnnxUpload",
    "ReRegister",
    "SubmitSpec",
    "Unavailable",
    "ValidationReport",
    "utc_now",
]


@dataclass(frozen=True)
class CoordinatorSettings:
    data_dir: Path
    heartbeat_interval: float = 5.0
    # A few intervals, so one late beat is not fatal.
    lease_ttl: float = 30.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    # The fewest records per ReportRecords; more when records come faster than report_rate
    # reports a second would carry (coordinator.fleet.report_sizing).
    records_per_report: int = 16
    report_rate: float = 100.0
    # Agents report at least this often (longer in a large fleet).
    report_within: float = 10.0
    # How far one agent's report size strays from the fleet's, so that agents do not report in step.
    report_jitter: float = DEFAULT_JITTER
    # Records per task handed to an agent for its warm start.
    warm_records_per_task: int = 32
    # How long an idle agent waits before asking for work again.
    idle_retry_after: float = 1.0


class Coordinator(ClientCalls, AgentCalls, Housekeeping):
    """Jobs, agents, shard and validation leases; `tick` moves jobs along in the background."""

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
        self.tvm_version = tvm_version()
        self.draining = False
        self._models = ModelCache(settings.data_dir)
        self._planner = BackgroundWorker("farm-planner")
        self._builder = BackgroundWorker("farm-builder")
        self._lock = threading.Lock()
        # In memory only, as hints: the RPC server flag of each agent's last heartbeat, the
        # latest progress of each task (rebuilt from the job's events when missing), and the
        # save_json form of workloads handed to agents.
        self._rpc_serving: dict[str, bool] = {}
        self._progress: dict[str, dict[tuple[str, str], dict]] = {}
        self._module_json: dict[int, str] = {}
        self._settle_lock = threading.Lock()
        self.report_sizing = ReportSizing(settings.records_per_report, settings.report_rate, settings.report_within,
                                          jitter=settings.report_jitter)
        self.live = LiveAgents(cluster, lambda: store.unit_of_work.state_version,
                               store.unit_of_work.lease_version)
        self._ingest = GroupCommit("farm-reports", ingest or functools.partial(report_ingest.ingest, cluster))
        self._claims = GroupCommit(
            "farm-claims", lambda claims: cluster.claim_shards(claims, utc_now(), settings.lease_ttl))
        self._progress_events = ProgressEvents()
        # What reports need of a job (coordinator.agent_calls), filled on demand.
        self._reporting_jobs: dict = {}
        self.wake = threading.Event()  # set when a tick should come early

    def close(self) -> None:
        self._claims.close()
        self._ingest.close()
        self._planner.stop()
        self._builder.stop()
