"""The coordinator's Prometheus metrics, served on ``farm coordinator --metrics-listen`` (plain HTTP).

Counters and histograms are bumped by one-line calls where things happen (the functions below:
a job's move once its transaction committed, coordinator.cluster_store.jobs); gauges of
what is in SQL (jobs, shards and agents by state, the best latency of running jobs) are read
when Prometheus scrapes (coordinator.state_metrics), so that no code path can forget to keep
them right. Label values are bounded: states, kinds, fingerprints, and a running job's id and
model on the one gauge that names jobs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram

from foundation.domain.job_spec import read_options
from foundation.domain.jobs import JobState
from foundation.domain.shards import ShardState
from foundation.errors import FarmError
from foundation.hardware.versions import build_labels
from foundation.metrics_http import MetricsServer, standard_registry

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.fleet import UnreadReport
    from foundation.registry.entities import RecordReport
    from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")

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

# A job's life, from its submit: seconds for one a registry's records nearly answer, hours to
# a day for a large model's budget.
JOB_DURATION = Histogram(
    "farm_job_duration_seconds", "Jobs from their submit to their end, by final state and mode (budget: tuned "
    "to a trial budget; until: tuned in rounds to a goal).", ["state", "mode"], registry=REGISTRY,
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400))
# From the submit to the job's start (its tasks planned and its shards queued): the wait for a
# fingerprint's agent to appear and for the coordinator's background worker to plan it.
QUEUE_WAIT = Histogram(
    "farm_job_queue_wait_seconds", "Jobs from their submit to their start (tasks planned, shards queued), by "
    "mode.", ["mode"], registry=REGISTRY, buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400))


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
for _mode in ("budget", "until"):
    QUEUE_WAIT.labels(_mode)
    for _state in (state for state in JobState if state.is_final):
        JOB_DURATION.labels(_state.value, _mode)


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


def job_moved(new: JobState, submitted: datetime, now: datetime, options: dict, job_id: str) -> None:
    """A job moved to ``new`` at ``now`` (committed): its queue wait once it runs, its duration once it ends."""
    if new is not JobState.RUNNING and not new.is_final:
        return
    try:
        mode = "until" if read_options(options, job_id).spec.until is not None else "budget"
    except FarmError as err:  # a damaged row fails the job where it is read; a commit is not undone here
        logger.warning("metrics: job %s not observed: %s", job_id, err.problem)
        return
    # Never negative, should the clock step back between the two.
    seconds = max(0.0, (now - submitted).total_seconds())
    if new is JobState.RUNNING:
        QUEUE_WAIT.labels(mode).observe(seconds)
    else:
        JOB_DURATION.labels(new.value, mode).observe(seconds)


def serve_metrics(listen: str, store: "RegistryStore") -> MetricsServer:
    """Serve the coordinator's metrics on ``listen`` (host:port; port 0: any free port)."""
    from coordinator.state_metrics import FarmStateCollector

    return MetricsServer(listen, REGISTRY, [FarmStateCollector(store)]).start()
