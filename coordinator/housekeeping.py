"""The coordinator's background tick: expire leases, bind, plan and build jobs, settle validations.

Everything a tick does is read from the registry, so a restarted coordinator carries on where
the last one stopped: jobs left queued are planned, builds left unfinished are redone, and
validations reported while it was away are settled. The time it was away is no agent's
silence: leases expire only a TTL after it can hear agents again.
"""

from __future__ import annotations

import datetime as dt
import logging

from coordinator import metrics
from coordinator.background_worker import BackgroundWorker
from coordinator.cluster_store import ClusterStore
from coordinator.fleet import LiveAgents
from coordinator.job_site import CoordinatorJobs
from coordinator.waiting_jobs import WaitingJobs
from foundation.clock import utc_now
from foundation.domain.jobs import JobState
from foundation.domain.leases import judges_silence
from foundation.domain.validations import ValidationState
from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")


class Housekeeping:
    """`tick` moves jobs along, each a step of its recipe (coordinator.job_site); plans and builds run on
    background threads of their own (one job at a time each), which `close` stops."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, live: LiveAgents, jobs: CoordinatorJobs, *,
                 lease_ttl: float, max_attempts: int):
        self._store = store
        self._cluster = cluster
        self._live = live
        self._jobs = jobs
        self._waiting = WaitingJobs(store, cluster, jobs.fail)
        self._lease_ttl = lease_ttl
        self._max_attempts = max_attempts
        self._started = utc_now()
        self._planner = BackgroundWorker("farm-planner")
        self._builder = BackgroundWorker("farm-builder")

    def close(self) -> None:
        self._planner.stop()
        self._builder.stop()
        self._jobs.close()

    def tick(self, now: dt.datetime | None = None, heard_since: dt.datetime | None = None) -> None:
        """One round of housekeeping; the server runs it every fraction of a second.

        ``heard_since``: since when this coordinator could hear agents (its start, or its
        registry's return; by default the Housekeeping's creation). No agent's silence is
        judged within a lease TTL of it (`foundation.domain.leases.judges_silence`): a restart
        or a lost registry costs no agent its lease.
        """
        now = now or utc_now()
        ttl, attempts = self._lease_ttl, self._max_attempts
        self._live.flush()  # the beats collected since the last tick, before judging silence
        if judges_silence(now.timestamp(), (heard_since or self._started).timestamp(), ttl):
            for agent in self._cluster.agents.mark_lost_agents(now, ttl):
                logger.info("agent %s (%s) missed its heartbeat TTL; its leases are re-queued",
                            agent.id, agent.hostname, extra={"agent_id": agent.id})
            metrics.leases_expired("shard", self._cluster.leases.expire_leases(now, ttl, attempts))
            metrics.leases_expired("validation", self._cluster.validations.expire_validations(now, ttl, attempts))
        self._bind_waiting_jobs(now)
        advance = self._jobs.advance
        for job in self._store.list_jobs(limit=500, state=JobState.QUEUED.value):
            if job.fingerprint_id is not None:
                self._planner.submit(job.id, lambda job_id=job.id: advance(job_id, JobState.QUEUED))
        # Tuned (a round of `--until` is judged then, and the next one planned), or built: on the builder,
        # the builds a previous coordinator process did not finish too.
        for job_id in self._cluster.plans.running_jobs_ready_to_build():
            self._builder.submit(job_id, lambda job_id=job_id: advance(job_id, JobState.RUNNING))
        for job in self._store.list_jobs(limit=500, state=JobState.BUILDING.value):
            self._builder.submit(job.id, lambda job_id=job.id: advance(job_id, JobState.BUILDING))
        for job in self._store.list_jobs(limit=500, state=JobState.VALIDATING.value):
            validation = self._cluster.validations.get_validation(job.id)
            if validation is not None and validation.state in (ValidationState.DONE, ValidationState.FAILED):
                self._jobs.settle(job.id)

    def _bind_waiting_jobs(self, now: dt.datetime) -> None:
        from foundation.hardware.targets import TUNABLE_KINDS

        for kind in TUNABLE_KINDS:
            self._waiting.bind(kind, now)
