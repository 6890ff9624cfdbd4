"""`farm.submit(..., wait=False)` embedded: the job runs in a background thread; the handle gives
its id, the events the CLI draws, its end, and a way to cancel it."""

from __future__ import annotations

import pytest

import farm
from foundation.errors import FarmError, Interrupted, TimedOut
from foundation.tvm_ir_lock import TVM_IR_LOCK

pytestmark = pytest.mark.slow


def test_a_background_submit_tells_its_progress_and_ends_as_a_waited_one(tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    handle = farm.submit("mlp-tiny", "llvm", 1, trials_per_task=4, runs=2, registry=registry, wait=False)
    job_id = handle.job_id(timeout=300)
    assert job_id and job_id.startswith("job-")
    events = list(handle.events())
    kinds = {e.kind for e in events}
    assert {"stage", "job", "planned", "started", "measured", "finished"} <= kinds, kinds
    assert any(e.kind == "stage" and e.state == "validating" for e in events)
    assert sum(e.data["new_trials"] for e in events if e.kind == "measured") > 0
    job = handle.wait(timeout=60)
    assert handle.done and job.id == job_id and job.succeeded
    assert farm.status(job_id, registry=registry).state == "succeeded"

    again = farm.submit("mlp-tiny", "llvm", 1, trials_per_task=4, runs=2, registry=registry, wait=False)
    assert again.wait(timeout=120).cache_hit and again.job_id() is not None


def test_a_cancelled_background_submit_ends_cancelled(tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    handle = farm.submit("mlp-tiny", "llvm", 1, trials_per_task=64, runs=2, registry=registry, wait=False)
    for event in handle.events():
        if event.kind == "measured":  # tuning: stop it after this batch
            handle.cancel()
            break
    job = handle.wait(timeout=300)
    assert job.state == "cancelled"
    running = farm.submit("mlp-tiny", "llvm", 2, trials_per_task=64, runs=2, registry=registry, wait=False)
    with pytest.raises(TimedOut):
        running.wait(timeout=0.01)
    assert running.job_id(timeout=300) is not None  # its job exists: cancelled, it ends so
    running.cancel()
    assert running.wait(timeout=300).state == "cancelled"
    # Before its job exists, as `farm submit` answers Ctrl-C then: nothing written. This thread holds the
    # process's turn to run a job, so the submit waits for it and its job cannot exist before the cancel
    # (unheld, a thread that ran ahead of this one on a busy box had made its job already).
    with TVM_IR_LOCK:
        unstarted = farm.submit("mlp-tiny", "llvm", 4, trials_per_task=64, runs=2, registry=registry, wait=False)
        unstarted.cancel()
        with pytest.raises(Interrupted, match="before any job started"):
            unstarted.wait(timeout=300)
    assert unstarted.job_id(timeout=0) is None


def test_bad_input_is_raised_by_the_call_not_the_thread(tmp_path):
    with pytest.raises(FarmError, match="batch must be at least 1"):
        farm.submit("mlp-tiny", "llvm", 0, registry=f"sqlite:///{tmp_path / 'r.db'}", wait=False)
