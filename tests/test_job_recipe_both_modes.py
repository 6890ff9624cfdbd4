"""One job spec, run by both modes, takes the same steps: the same state moves in the same order, the same
recipe notes after each, the same verdicts (foundation.job_driver.pipeline is the one recipe).

The embedded job runs in this process (farm.submit); the distributed one on a coordinator served in this
process and a real agent process on loopback, submitted by `farm submit`. Both run mlp-tiny with a few
trials, cold, on registries of their own. Each move is read where it is made: `JobPipeline.advance`, in
this process for both, is wrapped to note the job's row after each step that moved it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from farm.embedded import submit
from farm.local_cluster import Cluster
from farm.submit_values import SubmitRequest
from foundation.domain.job_spec import job_notes, job_spec
from foundation.job_driver.pipeline import BUILDING, JobPipeline

pytestmark = pytest.mark.slow

TRIALS, PER_TASK, RUNS, SEED = 8, 4, 3, 7
# The notes the recipe writes; where the tuning ran adds its own (warm_seeds for agents, warm_start_used).
RECIPE_NOTES = ("weights_layout", "weights_layout_choice", "reused", "trial_plan", "until")


def head(status: str) -> str:
    return status.split(":")[0].split(",")[0]


@pytest.fixture
def moves(monkeypatch) -> dict[str, list[dict]]:
    """Each mode's moves, as its job's row stood after each step that moved it."""
    made: dict[str, list[dict]] = {"embedded": [], "distributed": []}
    real = JobPipeline.advance
    # A guarded move takes a job out of a state once. Two coordinator threads may take the same step (the
    # tick and a reported validation both settle a validating job): the one that lost the race re-reads the
    # row the other moved, and its step's move is the winner's, noted once.
    noting = threading.Lock()

    def noted(self, work):
        before = work.state
        try:
            real(self, work)
        finally:
            job = work.job
            with noting:
                mine = made[job_spec(job).mode]
                if work.state is not before and not any(m["job"].id == job.id and m["from"] == before.value
                                                        for m in mine):
                    mine.append({"from": before.value, "to": job.state, "status": job.status,
                                 "notes": job_notes(job), "job": job})

    monkeypatch.setattr(JobPipeline, "advance", noted)
    return made


def test_one_spec_takes_the_same_steps_in_both_modes(moves, tmp_path):
    from coordinator.server import serve

    embedded = submit(SubmitRequest(model="mlp-tiny", target="llvm", batch=1,
                                    registry=f"sqlite:///{tmp_path / 'embedded.db'}", trials=TRIALS,
                                    trials_per_task=PER_TASK, seed=SEED, validation_runs=RUNS,
                                    weights_layout="plain", warm_start=False))
    assert embedded.job.state == "succeeded", embedded.job

    cluster = Cluster(tmp_path / "cluster", f"sqlite:///{tmp_path / 'distributed.db'}")
    (tmp_path / "cluster").mkdir()
    server = serve(listen=cluster.address, registry_url=cluster.registry_url, tracker=None,
                   tracker_listen=f"127.0.0.1:{cluster.tracker_port}", heartbeat_interval=1.0, lease_ttl=30.0,
                   tick_interval=0.2, data_dir=tmp_path / "coordinator")
    try:
        cluster.start_agent("a1")
        cluster.wait_agents(1)
        done = json.loads(cluster.farm("submit", "mlp-tiny", "llvm", "1", "--trials", str(TRIALS),
                                       "--trials-per-task", str(PER_TASK), "--seed", str(SEED), "--runs", str(RUNS),
                                       "--weights-layout", "plain", "--cold", "--json", "--timeout", "400").stdout)
        # The coordinator's thread notes its last move just after writing the row `farm submit` reads done.
        noted_by = time.monotonic() + 30
        while done["state"] == "succeeded" and time.monotonic() < noted_by and \
                not any(m["to"] == "succeeded" for m in moves["distributed"]):
            time.sleep(0.05)
    finally:
        stray = cluster.close()
        server.stop(grace=1)
    assert not stray, f"processes killed at the end: {stray}"
    assert done["state"] == "succeeded", done

    here, there = moves["embedded"], moves["distributed"]
    assert replace(job_spec(here[0]["job"]), mode="distributed") == job_spec(there[0]["job"])
    # The same moves, in the same order.
    assert [(m["from"], m["to"]) for m in here] == [(m["from"], m["to"]) for m in there] == [
        ("queued", "running"), ("running", "building"), ("building", "validating"), ("validating", "succeeded")]
    for step, (mine, theirs) in enumerate(zip(here, there)):
        # The same status line where the recipe alone writes it; its head where the site adds where it ran
        # (and the same verdict word whichever library the timings kept).
        assert head(mine["status"]) == head(theirs["status"]) or step == 0, (mine, theirs)
        if mine["to"] == "building":
            assert mine["status"] == theirs["status"] == BUILDING
        # The same recipe notes after each step.
        for name in RECIPE_NOTES:
            assert getattr(mine["notes"], name) == getattr(theirs["notes"], name), (step, name)
        ours, yours = mine["notes"].built_untuned, theirs["notes"].built_untuned
        assert (ours.of if ours else None) == (yours.of if yours else None), step  # which tasks: the records
    # The same verdict: validated, committed, succeeded.
    assert here[-1]["status"].startswith("succeeded") and there[-1]["status"].startswith("succeeded")
    assert embedded.artifact.validation["passed"] and done["artifact"]["validation"]["passed"]
    assert here[-1]["job"].artifact_id == embedded.artifact.id and there[-1]["job"].artifact_id
