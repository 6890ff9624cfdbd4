"""An agent's Prometheus metrics, served on ``farm agent --metrics-listen`` (plain HTTP, /metrics).

Seeds measured first (`farm_warm_start_seeds_total{source}`) are counted by the seed round;
reported records the coordinator refused (`farm_reported_records_refused_total`) as each report is answered.
Trials and build/measure durations are counted as candidates come back from the builder and
the runner (`MeasureMetrics`, the worker pools' observer); what the agent is (its fingerprint
and device) and how often its TVM RPC server was restarted are read from the running Agent
when Prometheus scrapes. Label values are bounded: a fingerprint, a target kind, an outcome.
/healthz says whether the agent's main loop still turns (`LoopLiveness`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from foundation.hardware.versions import build_labels
from foundation.meta_schedule.measure import trial_outcome
from foundation.meta_schedule.warm.seed_metrics import SEEDS_MEASURED
from foundation.metrics_http import MetricsServer, standard_registry


class RunningAgent(Protocol):
    """What the collector reads of agent.daemon.Agent (which imports this module)."""

    fingerprint: object  # foundation.hardware.fingerprint.Fingerprint, once the agent started
    rpc_server: object  # agent.rpc_server.SupervisedRPCServer, once started
    loop_turned_at: float | None  # time.monotonic() of the main loop's latest turn (None: not yet)

REGISTRY: CollectorRegistry = standard_registry(build_labels())
OUTCOMES = ("ok", "build_error", "run_error", "timeout")

TRIALS = Counter("farm_trials", "Candidates built and measured, by what became of them.",
                 ["fingerprint", "target_kind", "outcome"], registry=REGISTRY)
# Refused by the coordinator, never stored: a trace that does not replay on its task, or times no
# kernel takes (coordinator.calls.record_checks). Any at all means this agent measures wrongly.
REPORTED_RECORDS_REFUSED = Counter(
    "farm_reported_records_refused", "Records this agent reported that the coordinator refused.",
    ["fingerprint"], registry=REGISTRY)
# A batch is MetaSchedule's num_trials_per_iter candidates (16 by default): built in parallel
# by the build workers, measured one after another on the device.
BUILD_DURATION = Histogram(
    "farm_build_duration_seconds", "Wall time of building one batch of candidates.", registry=REGISTRY,
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
MEASURE_DURATION = Histogram(
    "farm_measure_duration_seconds", "Wall time of measuring one batch of candidates on the device.",
    registry=REGISTRY, buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600))
# Counted by the seed round itself, which knows nothing of the agent (foundation.meta_schedule.warm).
REGISTRY.register(SEEDS_MEASURED)


class MeasureMetrics:
    """The worker pools' observer (foundation.meta_schedule.measure.MeasureObserver): counts
    every candidate once, a failed build when built and the rest when measured."""

    def __init__(self, fingerprint_id: str, target_kinds: Sequence[str]):
        self.fingerprint_id = fingerprint_id
        for kind in target_kinds:  # every series exists from the start, at 0
            for outcome in OUTCOMES:
                TRIALS.labels(fingerprint_id, kind, outcome)

    def built(self, target_kind: str, results: Sequence, seconds: float) -> None:
        BUILD_DURATION.observe(seconds)
        for result in results:
            if result.error_msg:
                self._count(target_kind, trial_outcome("build", result.error_msg))

    def measured(self, target_kind: str, results: Sequence, seconds: float) -> None:
        MEASURE_DURATION.observe(seconds)
        for result in results:
            self._count(target_kind, trial_outcome("run", result.error_msg))

    def _count(self, target_kind: str, outcome: str) -> None:
        TRIALS.labels(self.fingerprint_id, target_kind, outcome).inc()


class AgentCollector(Collector):
    """What the running Agent knows, read at scrape time."""

    def __init__(self, agent: RunningAgent, device: str):
        self.agent = agent
        self.device = device

    def collect(self):
        info = GaugeMetricFamily("farm_agent_info", "This agent: its fingerprint and device (always 1).",
                                 labels=["fingerprint", "device"])
        fingerprint = self.agent.fingerprint
        if fingerprint is not None:  # known once the agent has started
            info.add_metric([fingerprint.id, self.device], 1)
        yield info
        restarts = CounterMetricFamily("farm_rpc_server_restarts",
                                       "Times this agent restarted its TVM RPC server (agent.rpc_server).")
        server = self.agent.rpc_server
        restarts.add_metric([], server.restarts if server is not None else 0)
        yield restarts


# The main loop (agent.daemon.Agent.run) turns at least every 0.25 s; the longest it is held
# by design is the start of its TVM RPC server (agent.daemon.RPC_SERVER_START_TIMEOUT_S, 60 s).
LOOP_STALE_AFTER_S = 120.0


class LoopLiveness:
    """The agent's /healthz: alive while its main loop turned within ``stale_after_s``. The
    metrics thread answers even when the loop is stuck, so /metrics alone proves nothing."""

    def __init__(self, agent: RunningAgent, stale_after_s: float = LOOP_STALE_AFTER_S):
        self.agent = agent
        self.stale_after_s = stale_after_s

    def __call__(self) -> tuple[bool, str]:
        turned = self.agent.loop_turned_at
        if turned is None:
            return False, "the agent's main loop has not started"
        age = time.monotonic() - turned
        if age > self.stale_after_s:
            return False, f"the agent's main loop last turned {age:.0f} s ago (limit {self.stale_after_s:g} s)"
        return True, f"the agent's main loop turned {age:.1f} s ago"


def serve_metrics(listen: str, agent: RunningAgent, device: str,
                  stale_after_s: float = LOOP_STALE_AFTER_S) -> MetricsServer:
    """Serve this agent's metrics on ``listen`` (host:port; port 0: any free port), and its
    liveness on /healthz."""
    return MetricsServer(listen, REGISTRY, [AgentCollector(agent, device)],
                         health=LoopLiveness(agent, stale_after_s)).start()
