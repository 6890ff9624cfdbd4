"""Jobs submitted before any agent of their kind registered: each is given a fingerprint once one has.

The tick binds them, and so does a submit that finds agents of the kind before it looks for an equal
job to join: between an agent's registration and the next tick, the waiting job has no fingerprint,
and a submit that looked only for bound jobs made a second equal job beside it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from coordinator.cluster_store import ClusterStore
from coordinator.fingerprints import registered_fingerprint
from foundation.domain.jobs import JobState
from foundation.errors import FarmError
from foundation.job_driver.admission import QUEUED
from foundation.registry.store import RegistryStore

# fail(job_id, state, status, error): CoordinatorJobs.fail
FailJob = Callable[[str, JobState, str, str], object]


class WaitingJobs:
    """Binds the queued jobs of a target kind that wait for a fingerprint to the kind's fingerprint
    with the most agents (it tunes fastest); a job whose target those agents cannot measure fails."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, fail: FailJob):
        self._store = store
        self._cluster = cluster
        self._fail = fail

    def bind(self, kind: str, now: dt.datetime) -> None:
        from foundation.hardware.targets import measurable_target, target_json

        waiting = self._cluster.jobs.queued_jobs_without_fingerprint(kind)
        if not waiting:
            return
        matching = self._cluster.agents.agents_matching(kind)
        if not matching:
            return
        fp_id = max(sorted(matching), key=lambda f: matching[f])
        fingerprint = registered_fingerprint(self._store, fp_id)
        for job in waiting:
            try:  # as a submit with agents there checks it (coordinator.calls.client)
                target = target_json(measurable_target(job.target_request, fingerprint))
            except FarmError as err:
                self._fail(job.id, JobState.QUEUED, "failed: bad target", str(err))
                continue
            # None where another coordinator, or this one's tick, bound it first: it is bound either way.
            self._cluster.jobs.bind_job_fingerprint(job.id, fp_id, target, now, status=QUEUED)
