"""A coordinator's job, fetched over real gRPC on loopback (farm.client), reads as the same job's embedded document
(farm.registry_jobs): its trial plan's per-task cap, its rounds' plans, and its latency goal in ms, before the first
round too."""

from __future__ import annotations

import pytest

from farm.cli.views import job_fields
from farm.client import CoordinatorClient, job_json
from farm.job_document import Job
from farm.registry_jobs import job_document
from foundation.domain.job_spec import DISTRIBUTED, JobNotes, JobSpec, stored_options
from foundation.domain.jobs import JobState
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import TaskDemand, TrialPlan, plan_trials
from foundation.domain.tuning_rounds import Comparison, Goal, RoundResult, Stop, UntilRequest

GOAL = Goal("latency", 12.3456789)  # its words round it: "12.3457 ms"
TASKS = [TaskDemand(f"fused_conv2d_add_relu{i}", flop=1e8 * (i + 1) ** 2, weight=1) for i in range(16)]
SPEC = JobSpec(DISTRIBUTED, "plain", trials=439, trials_per_task=32, until=UntilRequest(GOAL, patience=1))


@pytest.fixture
def coordinator(start):
    """A coordinator on loopback, its registry holding a model to hang jobs on, and a client of it."""
    server, _channel = start()
    store = server.coordinator.store
    store.upsert_fingerprint("cpu-test", "cpu", "test cpu", {})
    store.upsert_model(model_id="model-1", name="mlp-tiny", source="zoo", source_digest="v1", batch=1, inputs=[],
                       weights=[], num_parameters=1)
    client = CoordinatorClient(server.address, timeout=10)
    yield store, client
    client.close()


def both_documents(store, client, job) -> tuple[dict, dict]:
    """The job's document as an embedded job's registry writes it, and as the coordinator's client reads it."""
    model = store.get_model(job.model_id)
    return job_document(store.get_job(job.id), model.name, model.batch, None), job_json(client.get_job(job.id))


def test_a_coordinators_job_reads_as_its_embedded_document(coordinator):
    store, client = coordinator
    plan = plan_trials(TASKS, 439, per_task_cap=32)
    first = plan_trials(TASKS, 200, per_task_cap=32).trials
    second = plan_trials(TASKS, 239, per_task_cap=32, spent=first).trials
    rounds = [RoundResult(sum(planned), Comparison(median, median + 0.5, GOAL.latency_ms, 5, None, False), median - 0.6)
              for planned, median in ((first, 14.5), (second, 14.4))]
    until = RoundsOutcome(GOAL, GOAL.latency_ms, rounds=rounds, planned=[first, second], stopped=Stop.PATIENCE)
    job = store.create_job(model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-test", trials_budget=439,
                           options=stored_options(SPEC, JobNotes(trial_plan=plan, until=until)),
                           state=JobState.SUCCEEDED)
    assert max(plan.trials) == 32 < plan.total == 439  # a plan its cap binds: the budget says nothing of the cap

    embedded, remote = both_documents(store, client, job)
    assert remote["trial_plan"] == embedded["trial_plan"] and remote["trial_plan"]["per_task_cap"] == 32
    assert remote["until"] == embedded["until"] and remote["until"]["planned"] == [first, second]
    theirs = Job.from_document(remote)
    stored = TrialPlan.from_json(plan.to_json())  # what the registry holds: shares to six places
    assert theirs.trial_plan == stored and theirs.until.planned == [first, second]
    assert theirs.until.goal == GOAL and theirs.until.goal_ms == GOAL.latency_ms
    # So `farm status` says the same of it with or without --coordinator.
    lines, remote_lines = dict(job_fields(embedded)), dict(job_fields(remote))
    assert remote_lines["Plan"] == lines["Plan"] and remote_lines["Until"] == lines["Until"]


def test_a_coordinators_latency_goal_before_its_first_round_is_the_goal_its_rounds_hold(coordinator):
    """Cancelled before its first round was planned: its notes have no rounds, its spec the goal."""
    store, client = coordinator
    job = store.create_job(model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-test", trials_budget=439,
                           options=stored_options(SPEC), state=JobState.CANCELLED)
    embedded, remote = both_documents(store, client, job)
    assert embedded["until"] is None and embedded["trial_plan"] is None is remote["trial_plan"]
    assert remote["until"]["goal"] == "12.3457 ms" and remote["until"]["goal_ms"] == GOAL.latency_ms
    theirs = Job.from_document(remote)
    assert theirs.until.goal == GOAL and not theirs.until.rounds and not theirs.until.planned
