"""The coordinator's Prometheus metrics, served on ``farm coordinator --metrics-listen`` (plain HTTP).

Counters and histograms are bumped by one-line calls where things happen (the functions below,
and coordinator.job_metrics for a job's committed moves); gauges of what is in SQL (jobs, shards
and agents by state, the best latency of running jobs, when unfinished jobs last moved) are read
when Prometheus scrapes (coordinator.state_metrics), so that no code path can forget to keep
them right. Label values are bounded: states, kinds, fingerprints, and an unfinished job's id
and model on the gauges that name jobs.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from coordinator.job_metrics import JOB_DURATION, QUEUE_WAIT
from foundation.domain.shards import ShardState
from foundation.hardware.versions import build_labels
from foundation.metrics_http import HealthCheck, MetricsServer, standard_registry

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.fleet import UnreadReport
    from foundation.registry.entities import RecordReport
    from foundation.registry.store import RegistryStore

REGISTRY: CollectorRegistry = standard_registry(build_labels())
RATE_WINDOW_S = 60.0

LEASE_EXPIRATIONS = Counter("farm_lease_expirations", "Leases whose agent went silent for the lease TTL.",
                            ["kind"], registry=REGISTRY)
SHARD_RETRIES = Counter("farm_shard_retries", "Shards re-queued for another attempt (expired or failed).",
                        registry=REGISTRY)
RECORDS_INGESTED = Counter("farm_records_ingested", "Measured records agents reported that the registry kept.",
                           ["fingerprint"], registry=REGISTRY)
RECORDS_REFUSED = Counter("farm_records_refused", "Reported records refused, never stored: a trace that does not "
                          "replay on its task, times no call could take, a record too large.", ["fingerprint"],
                          registry=REGISTRY)
REGISTRY_LOOKUPS = Counter("farm_registry_lookups", "Submissions answered from the registry (hit) or not (miss).",
                           ["result"], registry=REGISTRY)
ARTIFACTS_COMMITTED = Counter("farm_artifacts_committed", "Validated libraries committed to the registry.",
                              registry=REGISTRY)
# The agents count the seeds they measure on their own /metrics; this is the fleet's sum, as
# their shards report it (a stale attempt's report is not counted).
WARM_START_SEEDS = Counter("farm_warm_start_seeds", "Seeds the agents measured first in their searches, by where "
                           "they came from (own_fingerprint, other_fingerprint).", ["source"], registry=REGISTRY)

# Observed by the cluster store as a job's move commits (coordinator.job_metrics), which
# knows nothing of the rest of the coordinator's metrics.
REGISTRY.register(JOB_DURATION)
REGISTRY.register(QUEUE_WAIT)


class _TrialRates:
    """Each agent's reported trials over the last RATE_WINDOW_S seconds (few entries per agent:
    one per report)."""

    def __init__(self, window: float = RATE_WINDOW_S):
        self.window = window
        self._lock = threading.Lock()
        self._reports: dict[str, deque[tuple[float, int]]] = {}

    def note(self, agent_id: str, trials: int) -> None:
        now = time.monotonic()
        with self._lock:
            reports = self._reports.setdefault(agent_id, deque())
            reports.append((now, trials))
            self._forget(reports, now)

    def per_second(self, agent_id: str) -> float:
        now = time.monotonic()
        with self._lock:
            reports = self._reports.get(agent_id)
            if not reports:
                return 0.0
            self._forget(reports, now)
            return sum(trials for _, trials in reports) / self.window

    def _forget(self, reports: deque, now: float) -> None:
        while reports and reports[0][0] < now - self.window:
            reports.popleft()


_RATES = _TrialRates()
for _kind in ("shard", "validation"):
    LEASE_EXPIRATIONS.labels(_kind)
for _result in ("hit", "miss"):
    REGISTRY_LOOKUPS.labels(_result)


def leases_expired(kind: str, changed: Sequence) -> None:
    """``changed``: what expire_leases / expire_validations returned (one per expired lease)."""
    LEASE_EXPIRATIONS.labels(kind).inc(len(changed))
    if kind == "shard":
        SHARD_RETRIES.inc(sum(1 for shard in changed if shard.state is ShardState.PENDING))


def shard_failed(state: ShardState | None) -> None:
    """An agent reported a shard failed, and it is now ``state`` (pending: it is tried again)."""
    if state is ShardState.PENDING:
        SHARD_RETRIES.inc()


def report_committed(report: "UnreadReport", result: "RecordReport") -> None:
    if result.accepted:
        RECORDS_INGESTED.labels(report.fingerprint_id).inc(result.stored)
        _RATES.note(report.agent_id, report.trials)


def records_refused(fingerprint_id: str, count: int) -> None:
    RECORDS_REFUSED.labels(fingerprint_id).inc(count)


def trials_per_second(agent_id: str) -> float:
    """What `farm agents` shows: the agent's reported trials over the last minute, per second."""
    return _RATES.per_second(agent_id)


def registry_lookup(hit: bool) -> None:
    REGISTRY_LOOKUPS.labels("hit" if hit else "miss").inc()


def artifact_committed() -> None:
    ARTIFACTS_COMMITTED.inc()


def warm_start_seeds(source: str, count: int) -> None:
    """An agent measured ``count`` seeds from ``source`` ("own_fingerprint" or "other_fingerprint")."""
    WARM_START_SEEDS.labels(source).inc(count)


def serve_metrics(listen: str, store: "RegistryStore", health: HealthCheck | None = None) -> MetricsServer:
    """Serve the coordinator's metrics on ``listen`` (host:port; port 0: any free port), and
    ``health`` (coordinator.serving_health) on /healthz."""
    from coordinator.state_metrics import FarmStateCollector

    return MetricsServer(listen, REGISTRY, [FarmStateCollector(store)], health=health).start()
