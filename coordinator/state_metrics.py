"""Gauges of the farm's SQL state, read when Prometheus scrapes: jobs, shards and agents by state,
the estimated latency of each running job's model, and when each unfinished job last moved.

A scrape costs a few GROUP BY queries over indexed state columns, one read of the agents (few),
for each running job the task_progress events written since the last scrape (a job's task
weights are read once), and each unfinished job's latest event (by the job's event index).
Nothing here writes.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from foundation.domain.jobs import JobState
from foundation.domain.shards import ShardState
from foundation.registry.schema import AgentRow, JobEventRow, JobRow, JobTaskRow, ModelRow, ShardRow, ValidationRow
from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")

LEASED = "leased"  # the state of a held shard lease and of a held validation lease


class _RunningJob:
    """What the latency gauge keeps of one running job between scrapes."""

    def __init__(self, model: str, weights: dict[str, int]):
        self.model = model
        self.weights = weights  # task name -> its weight (occurrences in the model)
        self.best_us: dict[str, float] = {}
        self.after = 0  # the last event read

    def estimated_seconds(self) -> float | None:
        """MetaSchedule's estimate of the model's latency: each task's best time by its weight;
        None until every task has one."""
        if not self.weights or set(self.weights) - set(self.best_us):
            return None
        return sum(self.best_us[name] * weight for name, weight in self.weights.items()) / 1e6


class FarmStateCollector(Collector):
    def __init__(self, store: RegistryStore):
        self.store = store
        self._running: dict[str, _RunningJob] = {}
        self._lock = threading.Lock()  # scrapes may overlap

    def collect(self):
        try:
            with self._lock:
                families = self._families()
        except Exception as err:  # a scrape must not fail because the database hiccuped
            logger.warning("metrics: cannot read the farm's state: %s", err)
            return
        yield from families

    def _families(self) -> list[GaugeMetricFamily]:
        with self.store.unit_of_work.read() as session:
            jobs = dict(session.execute(select(JobRow.state, func.count()).group_by(JobRow.state)).all())
            shards = dict(session.execute(select(ShardRow.state, func.count()).group_by(ShardRow.state)).all())
            agents = session.execute(select(AgentRow.id, AgentRow.fingerprint_id, AgentRow.state)).all()
            busy = set(session.scalars(select(ShardRow.agent_id).where(ShardRow.state == LEASED).distinct()))
            busy |= set(session.scalars(select(ValidationRow.agent_id).where(ValidationRow.state == LEASED)))
            running = list(session.scalars(select(JobRow.id).where(JobRow.state == JobState.RUNNING.value)))
            latencies = self._latencies(session, running)
            last_events = _last_events(session)

        job_family = GaugeMetricFamily("farm_jobs", "Jobs in the registry, by state.", labels=["state"])
        for state in JobState:
            job_family.add_metric([state.value], jobs.get(state.value, 0))
        shard_family = GaugeMetricFamily("farm_shards", "Shards of all jobs, by state.", labels=["state"])
        for state in ShardState:
            shard_family.add_metric([state.value], shards.get(state.value, 0))
        agent_family = GaugeMetricFamily("farm_agents", "Registered agents by fingerprint and state "
                                         "(idle, busy: holding a lease, lost: silent past the lease TTL).",
                                         labels=["fingerprint", "state"])
        counts: dict[tuple[str, str], int] = {}
        for agent_id, fingerprint_id, state in agents:
            shown = "lost" if state == "lost" else "busy" if agent_id in busy else "idle"
            counts[(fingerprint_id, shown)] = counts.get((fingerprint_id, shown), 0) + 1
        for (fingerprint_id, state), count in sorted(counts.items()):
            agent_family.add_metric([fingerprint_id, state], count)
        latency_family = GaugeMetricFamily(
            "farm_job_best_latency_seconds",
            "A running job's model latency as its best schedules so far predict it (each task's best "
            "measured time by its weight), once every task has one.", labels=["job_id", "model"])
        for job_id, (model, seconds) in sorted(latencies.items()):
            latency_family.add_metric([job_id, model], seconds)
        event_family = GaugeMetricFamily(
            "farm_job_last_event_timestamp_seconds",
            "When each unfinished job last moved: its latest event (a state change, a shard leased or done, "
            "a task's progress), in seconds since the epoch.", labels=["job_id", "model", "state"])
        for job_id, model, state, when in last_events:
            event_family.add_metric([job_id, model or "", state], when.timestamp())
        return [job_family, shard_family, agent_family, latency_family, event_family]

    def _latencies(self, session, running: list[str]) -> dict[str, tuple[str, float]]:
        for gone in set(self._running) - set(running):
            del self._running[gone]
        out = {}
        for job_id in running:
            job = self._running.get(job_id)
            if job is None:
                model = session.scalar(select(ModelRow.name).join(JobRow, JobRow.model_id == ModelRow.id)
                                       .where(JobRow.id == job_id))
                weights = dict(session.execute(select(JobTaskRow.name, JobTaskRow.weight)
                                               .where(JobTaskRow.job_id == job_id)).all())
                job = self._running[job_id] = _RunningJob(model or "", weights)
            events = session.execute(
                select(JobEventRow.id, JobEventRow.payload)
                .where(JobEventRow.job_id == job_id, JobEventRow.id > job.after, JobEventRow.kind == "task_progress")
                .order_by(JobEventRow.id)
            ).all()
            for sequence, payload in events:
                job.after = sequence
                best, name = float(payload.get("best_us") or 0.0), payload.get("task_name", "")
                if best > 0 and best < job.best_us.get(name, float("inf")):
                    job.best_us[name] = best
            seconds = job.estimated_seconds()
            if seconds is not None:
                out[job_id] = (job.model, seconds)
        return out


def _last_events(session) -> list[tuple[str, str | None, str, datetime]]:
    """Each unfinished job's id, model, state and the time of its latest event (a job has one
    from its submit on): what the stuck-job alert compares with the clock."""
    unfinished = [state.value for state in JobState if not state.is_final]
    latest = (select(JobEventRow.job_id, func.max(JobEventRow.id).label("event_id"))
              .join(JobRow, JobRow.id == JobEventRow.job_id)
              .where(JobRow.state.in_(unfinished)).group_by(JobEventRow.job_id).subquery())
    query = (select(JobRow.id, ModelRow.name, JobRow.state, JobEventRow.created_at)
             .join(latest, latest.c.job_id == JobRow.id)
             .join(JobEventRow, JobEventRow.id == latest.c.event_id)
             .outerjoin(ModelRow, ModelRow.id == JobRow.model_id)
             .order_by(JobRow.id))
    return [tuple(row) for row in session.execute(query)]
