"""A job's queue wait and duration on the coordinator's histograms: observed where the cluster store
moves the job, once the move committed, by final state and mode; on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from coordinator.metrics import REGISTRY
from foundation.domain.jobs import JobState
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.registry.schema import JobRow
from foundation.registry.session import Changes

from support.cluster_rows import CUDA_TARGET, GPU, T0, at, tasks_of

QUEUE_WAIT = "farm_job_queue_wait_seconds"
DURATION = "farm_job_duration_seconds"


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def histogram(name: str, **labels: str) -> dict[str, float]:
    """The histogram's count, sum and the buckets the tests look at, for ``labels``."""
    return {"count": sample(f"{name}_count", **labels), "sum": sample(f"{name}_sum", **labels),
            **{le: sample(f"{name}_bucket", le=le, **labels) for le in ("60.0", "120.0", "600.0", "1800.0")}}


def moved_by(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before``; compare it with pytest.approx: the process's registry holds earlier tests'
    observations, and (s + 90) - s need not be 90 to the last bit."""
    return {key: after[key] - before[key] for key in before}


def submitted(cluster, options: dict):
    job, _ = cluster.jobs.create_job(model_id="model-1", target_request="cuda", target_kind="cuda", target=CUDA_TARGET,
                                     fingerprint_id=GPU, trials_budget=16, options=options, now=T0)
    return job


def planned(cluster, job, now) -> None:
    tasks = tasks_of(2)
    cluster.plans.add_job_plan(job.id, tasks,
                               split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop) for t in tasks], 2, 16), now)


def test_the_wait_is_observed_when_the_job_starts_and_the_duration_when_it_ends(cluster_store):
    wait, took = histogram(QUEUE_WAIT, mode="budget"), histogram(DURATION, state="cancelled", mode="budget")
    job = submitted(cluster_store, {"seed": 1})
    assert histogram(QUEUE_WAIT, mode="budget")["count"] == wait["count"], "a queued job has waited no wait yet"

    planned(cluster_store, job, at(90))
    assert moved_by(wait, histogram(QUEUE_WAIT, mode="budget")) == \
        pytest.approx({"count": 1, "sum": 90, "60.0": 0, "120.0": 1, "600.0": 1, "1800.0": 1})
    cluster_store.plans.cancel_job(job.id, at(900))
    assert moved_by(took, histogram(DURATION, state="cancelled", mode="budget")) == \
        pytest.approx({"count": 1, "sum": 900, "60.0": 0, "120.0": 0, "600.0": 0, "1800.0": 1})
    # A job cancelled again, already final, is not observed twice.
    cluster_store.plans.cancel_job(job.id, at(1000))
    assert histogram(DURATION, state="cancelled", mode="budget")["count"] == took["count"] + 1


def test_a_job_tuned_in_rounds_is_observed_as_mode_until(cluster_store):
    """The mode is read from the job's spec: a goal (`farm submit --until`) makes it `until`."""
    took, budget = histogram(DURATION, state="failed", mode="until"), histogram(DURATION, state="failed", mode="budget")
    job = submitted(cluster_store, {"seed": 1, "until_goal": "20ms"})
    cluster_store.jobs.move_job(job.id, JobState.QUEUED, JobState.FAILED, at(30), status="failed: no plan",
                                error="no plan")
    assert moved_by(took, histogram(DURATION, state="failed", mode="until"))["count"] == 1
    assert moved_by(budget, histogram(DURATION, state="failed", mode="budget"))["count"] == 0


def test_a_move_rolled_back_is_not_observed(store, cluster_store):
    took = histogram(DURATION, state="failed", mode="budget")
    job = submitted(cluster_store, {"seed": 1})
    with pytest.raises(RuntimeError), store.unit_of_work.write(Changes.STATE) as session:
        row = session.get_one(JobRow, job.id)
        cluster_store.jobs.move_in(session, row, JobState.FAILED, at(60), status="failed", error="lost")
        raise RuntimeError("the rest of the unit of work failed")
    assert store.get_job(job.id).state == "queued"
    assert moved_by(took, histogram(DURATION, state="failed", mode="budget"))["count"] == 0

    cluster_store.jobs.move_job(job.id, JobState.QUEUED, JobState.FAILED, at(60), status="failed", error="lost")
    assert moved_by(took, histogram(DURATION, state="failed", mode="budget"))["count"] == 1
