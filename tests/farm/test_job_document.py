"""A job's document read back as farm.Job: its notes typed, the same whether the registry or a coordinator holds
the job, and a document this version cannot read refused in one line."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from coordinator.messages import job_message
from coordinator.values import JobView
from farm.cli.views import job_fields
from farm.client import job_json
from farm.job_document import Job, JobArtifact, Latency, MalformedJob
from farm.registry_jobs import job_document
from foundation.domain.built_untuned import BuiltUntuned
from foundation.domain.job_spec import DISTRIBUTED, JobNotes, JobSpec, stored_options
from foundation.domain.jobs import JobState
from foundation.domain.reuse import ReuseMode, TaskHistory, plan_reuse
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.trial_plan import PlannedTrials, TrialPlan
from foundation.domain.tuning_rounds import ONNXRUNTIME, Comparison, Goal, RoundResult, Stop, UntilRequest
from foundation.domain.untuned_speed import SpeedCheck
from foundation.domain.warm_start_use import EMBEDDED_SEARCH, WarmStartUse, WarmStartUsed
from foundation.domain.weights_layout import LayoutChoice, WeightsLayout
from foundation.errors import EXIT_UNREACHABLE
from foundation.registry.entities import Artifact, Model
from foundation.registry.entities import Job as StoredJob
from foundation.wire import farm_pb2

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
# Capped below its budget, in two phases, its first task timed in the model: every figure the plan has.
PLAN = TrialPlan(tasks=(PlannedTrials("fused_dense", 40, 0.7, False, True, 1.25, 0.5, (20, 20)),
                        PlannedTrials("fused_dense1", 22, 0.3, False, False, None, 0.125, (11, 11)),
                        PlannedTrials("reshape", 2, 0.0, True, False, phases=(2,))), budget=64, per_task_cap=40,
                 phases=(33, 31), peak_gflops=96.5)
UNTIL = RoundsOutcome(goal=Goal(ONNXRUNTIME), goal_ms=20.0,
                      rounds=[RoundResult(8, Comparison(30.0, 31.0, 20.5, 5, 0, False), 29.0)],
                      planned=[[4, 4, 0]], stopped=Stop.PATIENCE)
NOTES = JobNotes(
    weights_layout=WeightsLayout.PREPACKED,
    weights_layout_choice=LayoutChoice(WeightsLayout.PREPACKED, "asked for with --weights-layout prepacked"),
    reused=plan_reuse(ReuseMode.AUTO, [TaskHistory("fused_dense", 64), TaskHistory("fused_dense1", 0),
                                       TaskHistory("reshape", 1)], [40, 22, 2], 16, 64).summary(),
    trial_plan=PLAN,
    until=UNTIL,
    warm_start_used=WarmStartUsed({EMBEDDED_SEARCH: WarmStartUse(6, 3, 2, 1, 0, "ab" * 32, "", cost_model_kind="xgb")}),
    built_untuned=BuiltUntuned(("reshape",), 3),
)
SPEED = SpeedCheck(tuned_median_ms=1.5, untuned_median_ms=3.0, runs=100, untuned_runs=100, blocks=5)


def stored_job() -> tuple[StoredJob, Model, Artifact]:
    """A succeeded job with every note, as either side's registry keeps it."""
    job = StoredJob(id="job-1", model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-aaaa",
                    state=JobState.SUCCEEDED, cache_hit=False, trials_budget=64, trials_done=64,
                    options=NOTES.to_json(), error=None, artifact_id="art-1", created_at=NOW, started_at=NOW,
                    finished_at=NOW, target_kind="llvm", status="done")
    model = Model(id="model-1", name="mlp-tiny", source="zoo", source_digest="v1", batch=1, inputs=[], weights=[],
                  num_parameters=1, created_at=NOW)
    artifact = Artifact(id="art-1", model_id="model-1", target=job.target, fingerprint_id="cpu-aaaa", job_id=job.id,
                        sha256="cd" * 32, size=41_100, lib_format="so", latency_mean_ms=1.6, latency_median_ms=1.5,
                        latency_std_ms=0.1, untuned_latency_mean_ms=3.1,
                        validation={"passed": True, "speed": SPEED.to_json()}, tvm_version="0.x", software={},
                        created_at=NOW, weights_layout="prepacked")
    return job, model, artifact


def both_documents() -> tuple[dict, dict]:
    """The job's document as the registry writes it (an embedded job), and as a coordinator's client does."""
    job, model, artifact = stored_job()
    embedded = job_document(job, model.name, model.batch, artifact)
    remote = job_json(job_message(JobView(job, model, {}, [], artifact, 0)))
    return embedded, remote


def test_an_embedded_jobs_document_reads_back_as_the_notes_it_was_written_from():
    embedded, _ = both_documents()
    job = Job.from_document(embedded)
    assert job.state is JobState.SUCCEEDED and job.succeeded and job.created_at == NOW and job.batch == 1
    assert job.trial_plan == PLAN and job.reuse == NOTES.reused and job.built_untuned == NOTES.built_untuned
    assert job.weights_layout is WeightsLayout.PREPACKED and job.weights_layout_choice == NOTES.weights_layout_choice
    assert job.until.summary() == UNTIL.summary() and job.until.stopped is Stop.PATIENCE
    assert job.warm_start.seeds_offered == 6 and job.warm_start.shards == 1 and job.warm_start.pretrained_cost_model
    assert job.artifact == JobArtifact("art-1", "cd" * 32, 41_100, Latency(1.6, 1.5, 0.1), 3.1, True, SPEED)
    assert job.document == embedded


def test_a_coordinators_document_reads_as_the_same_notes():
    embedded, remote = both_documents()
    mine, theirs = Job.from_document(embedded), Job.from_document(remote)
    # The plan and the rounds as the notes hold them: the cap, phases and peak, and each round's plan.
    assert remote["trial_plan"] == embedded["trial_plan"] and theirs.trial_plan == mine.trial_plan == PLAN
    assert remote["until"] == embedded["until"] and theirs.until.planned == mine.until.planned == [[4, 4, 0]]
    assert theirs.reuse == mine.reuse and theirs.built_untuned == mine.built_untuned
    assert theirs.until.summary() == mine.until.summary()
    assert theirs.warm_start.describe() == mine.warm_start.describe()
    assert theirs.weights_layout_choice.why == mine.weights_layout_choice.why
    assert theirs.artifact.speed.describe() == mine.artifact.speed.describe() and theirs.artifact.validated
    assert theirs.shards == {"pending": 0, "leased": 0, "done": 0, "failed": 0, "cancelled": 0}
    # So `farm status` says the same of it, line for line, with or without --coordinator.
    shown = {"Plan", "Reuse", "Until", "Warm start", "Why", "Weights", "Against untuned", "Built untuned", "Latency"}
    lines, remote_lines = dict(job_fields(embedded)), dict(job_fields(remote))
    assert {name: lines[name] for name in shown} == {name: remote_lines[name] for name in shown}
    assert lines["Until"] == UNTIL.summary() and lines["Reuse"] == NOTES.reused.describe()


def test_a_coordinators_latency_goal_before_its_first_round_is_its_own_figure():
    """Its words round it ("12.3457 ms"); the wire carries the goal itself, as the job's rounds will hold it."""
    goal = Goal("latency", 12.3456789)
    spec = JobSpec(DISTRIBUTED, "plain", trials=64, until=UntilRequest(goal))
    job, model, _ = stored_job()
    job = dataclasses.replace(job, state=JobState.QUEUED, options=stored_options(spec), artifact_id=None)
    remote = job_json(job_message(JobView(job, model, {}, [], None, 0)))
    assert remote["until"]["goal"] == "12.3457 ms" and remote["until"]["goal_ms"] == 12.3456789
    read = Job.from_document(remote)
    assert read.until.goal == goal and read.until.goal_ms == 12.3456789 and not read.until.rounds


def test_an_older_coordinators_latency_goal_before_its_first_round_reads_as_its_words():
    """A coordinator from before JobUntil.goal_ms was set before the first round sends the goal's words only."""
    remote = job_json(farm_pb2.Job(id="job-2", state=farm_pb2.JOB_STATE_RUNNING, until=farm_pb2.JobUntil(goal="20 ms"),
                                   model=farm_pb2.ModelSummary(name="mlp-tiny", batch=1)))
    job = Job.from_document(remote)
    assert job.until.goal == Goal("latency", 20.0) and job.until.goal_ms == 20.0 and not job.until.rounds
    assert dict(job_fields(remote))["Until"] == "tuning in rounds until 20 ms: 0 rounds judged so far"


def test_an_older_coordinators_plan_and_rounds_read_with_the_documented_defaults():
    """A coordinator from before Job.trial_plan_budget and JobUntil.planned sends the plan's lines and the rounds
    only: the plan reads capped at the job's budget, the rounds with no plans; the rest as a current one's."""
    job, model, artifact = stored_job()
    message = job_message(JobView(job, model, {}, [], artifact, 0))
    message.ClearField("trial_plan_budget")
    message.until.ClearField("planned")
    for line in message.trial_plan:
        for name in ("in_model_ms", "loss_ms", "phases"):
            line.ClearField(name)
    older = Job.from_document(job_json(message))
    assert older.trial_plan.budget == older.trial_plan.per_task_cap == job.trials_budget == 64
    assert [(t.name, t.trials, t.share) for t in older.trial_plan.tasks] == [(t.name, t.trials, t.share)
                                                                             for t in PLAN.tasks]
    assert older.until.planned == [] and older.until.rounds == UNTIL.rounds and older.until.goal_ms == 20.0


@pytest.mark.parametrize("change, says", [
    (lambda doc: doc["until"].update(stopped="bored"), "until.stopped 'bored'"),
    (lambda doc: doc["reuse"].update(mode="most"), "'most' is not a valid ReuseMode"),
    (lambda doc: doc["warm_start"].update(seeds_borrowed=3), "warm_start holds seeds_borrowed"),
    (lambda doc: doc["artifact"]["latency_ms"].pop("median"), "lacks 'median'"),
    (lambda doc: doc.update(state="paused"), "'paused' is not a valid JobState"),
    (lambda doc: doc.pop("trial_plan"), "lacks 'trial_plan'"),
    (lambda doc: doc["until"].pop("goal_ms"), "lacks 'goal_ms'"),
])
def test_a_document_this_version_cannot_read_is_refused_naming_what(change, says):
    _, remote = both_documents()
    change(remote)
    with pytest.raises(MalformedJob) as refused:
        Job.from_document(remote)
    assert says in str(refused.value) and "job job-1's document" in str(refused.value)
    assert refused.value.exit_code == EXIT_UNREACHABLE and "another tvm-farm version" in refused.value.fix
