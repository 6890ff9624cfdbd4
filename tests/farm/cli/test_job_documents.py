"""A job is one JSON document, the same keys whether `farm jobs`, `farm status` or `farm submit`
prints it with --json, and whether the registry or a coordinator holds the job."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from farm.cli.app import main
from farm.submit_values import SubmitResult
from foundation.domain.reuse import ReuseMode, TaskHistory, plan_reuse
from foundation.domain.weights_layout import WeightsLayout
from foundation.models.model_key import model_key
from foundation.registry import RegistryStore
from foundation.registry.entities import Job


@pytest.fixture
def farm_json(monkeypatch, capsys, tmp_path):
    """Run `farm ARGS --json` in this process; the document it prints."""
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_REGISTRY", raising=False)

    def run(*args: str):
        monkeypatch.setattr(sys, "argv", ["farm", *args, "--json"])
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capsys.readouterr()
        assert exited.value.code == 0, err
        return json.loads(out)

    return run


@pytest.fixture
def registry_job(tmp_path) -> tuple[str, Job]:
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    store = RegistryStore(registry, create=True)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        store.upsert_model(model_id="model-1", name="mlp-tiny", source="zoo", source_digest="v1", batch=1, inputs=[],
                           weights=[], num_parameters=1)
        # Its one task reused, the note as a job writes it.
        reused = plan_reuse(ReuseMode.FULL, [TaskHistory("dense", 8)], 8, 8, 8).summary().to_json()
        job = store.create_job(model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-aaaa",
                               trials_budget=0, options={"reused": reused}, state="succeeded")
    finally:
        store.dispose()
    return registry, job


def test_jobs_status_and_submit_print_a_job_with_the_same_keys(farm_json, registry_job):
    registry, job = registry_job
    [listed] = farm_json("jobs", "--registry", registry)
    shown = farm_json("status", job.id, "--registry", registry)
    assert set(listed) == set(shown)
    assert listed["job"] == shown["job"] == listed["id"] == job.id
    # What `farm jobs --json` printed before (the registry row's fields) is all still there.
    assert {field.name for field in dataclasses.fields(Job)} <= set(listed)
    submitted = SubmitResult(job=job, cache_hit=True, fingerprint="cpu-aaaa", model=model_key("mlp-tiny", 1),
                             target='{"kind":"llvm"}', artifact=None, weights_layout=WeightsLayout.PLAIN).to_json()
    assert set(shown) <= set(submitted)
    assert set(submitted) - set(shown) == {"seconds"}  # a submit that did not tune adds only its time


def test_a_coordinators_job_has_the_registrys_keys(farm_json, registry_job):
    """One shape in both modes: a script reading `farm jobs --json` works with or without --coordinator."""
    from farm.client import job_json
    from foundation.wire import farm_pb2

    registry, job = registry_job
    shown = farm_json("status", job.id, "--registry", registry)
    remote = farm_pb2.Job(id="job-remote", state=farm_pb2.JOB_STATE_SUCCEEDED, target='{"kind":"llvm"}',
                          target_kind="llvm", model=farm_pb2.ModelSummary(name="mlp-tiny", batch=1))
    remote.failed_shards.append(farm_pb2.ShardFailure(shard_id="s-1", task_names=["dense"]))
    document = job_json(remote)
    assert list(document) == list(shown)  # the same keys, in the same order
    assert document["id"] == document["job"] == "job-remote" and document["runner"] is None
    assert shown["failed_shards"] == [] and document["failed_shards"][0]["shard"] == "s-1"


def test_a_coordinators_job_this_version_cannot_read_is_one_line(monkeypatch, capsys, tmp_path):
    """A coordinator of another version may send a note this one cannot read (here a reuse mode it does not
    know): `farm status` says so in one line naming it, exit 4, not a traceback nor an "internal error"."""
    from farm.client import CoordinatorClient
    from foundation.wire import farm_pb2

    job = farm_pb2.Job(id="job-remote", state=farm_pb2.JOB_STATE_SUCCEEDED, target_kind="llvm",
                       model=farm_pb2.ModelSummary(name="mlp-tiny", batch=1), reuse=farm_pb2.JobReuse(mode="most"))
    monkeypatch.setattr(CoordinatorClient, "get_job", lambda self, job_id: job)
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FARM_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["farm", "status", "job-remote", "--coordinator", "127.0.0.1:50051"])
    with pytest.raises(SystemExit) as exited:
        main()
    out, err = capsys.readouterr()
    assert exited.value.code == 4 and out == "", err
    [line] = err.splitlines()
    assert line.startswith("error: job job-remote's document does not read as this tvm-farm's: ValueError: 'most'")
    assert "another tvm-farm version" in line


@pytest.mark.slow
def test_a_tuned_jobs_status_reads_back_typed(tuned_mlp_tiny, farm_json, tmp_path):
    """The document `farm status --json` prints of a job tuned here reads as a farm.Job with its notes typed."""
    from farm.cli.views import job_fields
    from farm.job_document import Job

    home = tuned_mlp_tiny.copy_to(tmp_path / "tuned")
    submitted = tuned_mlp_tiny.submitted
    registry = f"sqlite:///{home / 'registry.db'}"
    job = Job.from_document(farm_json("status", submitted["job"], "--registry", registry))
    assert job.succeeded and job.id == submitted["job"] and job.trials == submitted["trials"] > 0
    assert 0 < job.trial_plan.total <= job.trials_budget and [t.name for t in job.trial_plan.tasks] == [
        t["task"] for t in submitted["trial_plan"]["tasks"]]
    assert job.weights_layout.value == submitted["weights_layout"] and job.weights_layout_choice.why
    assert job.reuse.mode.value == submitted["reuse"]["mode"] and job.warm_start.shards == 1
    assert job.artifact.id == submitted["artifact"]["id"] and job.artifact.validated
    assert job.artifact.latency.mean_ms == submitted["artifact"]["latency_ms"]["mean"]
    assert job.created_at <= job.started_at <= job.finished_at
    fields = dict(job_fields(job.document))
    assert fields["Plan"].startswith(f"{job.trial_plan.total} of {job.trials_budget} trials") and fields["Latency"]
