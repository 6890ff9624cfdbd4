"""A job's queue wait and duration (histograms of the coordinator's /metrics, coordinator.metrics),
observed where the cluster store moves jobs, once the move is committed (coordinator.cluster_store.jobs)."""

from __future__ import annotations

import logging
from datetime import datetime

from prometheus_client import Histogram

from foundation.domain.job_spec import read_options
from foundation.domain.jobs import JobState
from foundation.errors import FarmError

logger = logging.getLogger("farm.coordinator")

# A job's life, from its submit: seconds for one a registry's records nearly answer, hours to
# a day for a large model's budget.
JOB_DURATION = Histogram(
    "farm_job_duration_seconds", "Jobs from their submit to their end, by final state and mode (budget: tuned "
    "to a trial budget; until: tuned in rounds to a goal).", ["state", "mode"], registry=None,
    buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400))
# From the submit to the job's start (its tasks planned and its shards queued): the wait for a
# fingerprint's agent to appear and for the coordinator's background worker to plan it.
QUEUE_WAIT = Histogram(
    "farm_job_queue_wait_seconds", "Jobs from their submit to their start (tasks planned, shards queued), by "
    "mode.", ["mode"], registry=None, buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400))
for _mode in ("budget", "until"):  # every series exists from the start, empty
    QUEUE_WAIT.labels(_mode)
    for _state in (state for state in JobState if state.is_final):
        JOB_DURATION.labels(_state.value, _mode)


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
