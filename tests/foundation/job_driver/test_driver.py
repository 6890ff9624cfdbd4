"""The job driver on a real registry (SQLite and PostgreSQL): guarded moves, verdicts, dead runners, hits, locks."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
import threading

import pytest
from sqlalchemy import create_engine, text

from foundation.domain.jobs import JobState
from foundation.domain.runners import HEARTBEAT_TTL_S, Runner
from foundation.domain.transitions import IllegalTransition
from foundation.domain.weights_layout import WeightsLayout
from foundation.job_driver.driver import JobDriver, RegistryJobMoves, tuning_failure, validation_failure
from foundation.job_driver.hits import look_up_hit
from foundation.job_driver.runners import fail_dead_jobs, host_name, process_start_time, this_runner
from foundation.job_driver.tuning_lock import ScopeLock
from foundation.meta_schedule.progress import TaskProgress
from foundation.models.model_key import ModelKey
from foundation.registry.engine import parse_registry_url
from foundation.runtime.validation import ValidationResult

KEY = ModelKey("mlp", 1, "zoo", "v1")
TARGET = '{"kind":"llvm"}'


@pytest.fixture
def sleeper():
    """A real process that will be killed: its runner identity, and the process."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    runner = Runner(host_name(), proc.pid, process_start_time(proc.pid))
    yield runner, proc
    proc.kill()
    proc.wait()


def _seed(store):
    store.upsert_fingerprint("cpu-1", "cpu", "a cpu", {})
    store.upsert_model(model_id="m-1", name=KEY.name, source="zoo", source_digest=KEY.source_digest, batch=1,
                       inputs=[], weights=[], num_parameters=1)


def _job(store, runner, state="running"):
    _seed(store)
    job = store.create_job(model_id="m-1", target=TARGET, fingerprint_id="cpu-1", trials_budget=8,
                           options={"mode": "embedded"}, runner=runner)
    if state != "queued":
        store.update_job(job.id, state=state)
    return store.get_job(job.id)


def test_moves_follow_the_table_and_lose_to_another_process(store):
    job = _job(store, this_runner(), state="queued")
    driver = JobDriver(RegistryJobMoves(store), job.id, job.state)
    assert driver.advance(JobState.RUNNING, "running: tuning", trials_budget=16)
    moved = store.get_job(job.id)
    assert (moved.state, moved.status, moved.trials_budget) == ("running", "running: tuning", 16)
    assert moved.started_at is not None
    with pytest.raises(IllegalTransition):
        driver.advance(JobState.SUCCEEDED, "succeeded")
    # Another process ends the job first: this driver's move does not happen.
    JobDriver(RegistryJobMoves(store), job.id, "running").cancel("cancelled elsewhere")
    assert not driver.advance(JobState.BUILDING, "building")
    assert driver.state is JobState.RUNNING and store.get_job(job.id).state == "cancelled"


def test_verdicts_name_why():
    ok = ValidationResult(True, 0.0, 0.0, 1e-3, 1e-4)
    bad = ValidationResult(False, 3.0, 1.0, 1e-3, 1e-4, "output 0 differs at [0, 3]")
    assert validation_failure(ok) is None
    assert validation_failure(bad) == "tuned library disagrees with the untuned build: output 0 differs at [0, 3]"
    crashing = TaskProgress(index=0, name="dense", weight=1, flop=1e6, budget=8, trials=8, run_errors=8,
                            errors=["Illegal instruction"])
    assert "8 of 8 measured candidates failed" in tuning_failure([crashing])
    assert tuning_failure([TaskProgress(index=0, name="dense", weight=1, flop=1e6, budget=8, trials=8)]) is None


def test_a_job_whose_process_was_killed_is_failed_on_the_next_read(store, sleeper):
    runner, proc = sleeper
    dead = _job(store, runner)
    alive = _job(store, this_runner())
    assert fail_dead_jobs(store) == []  # both processes run
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    failed = fail_dead_jobs(store)
    assert [j.id for j in failed] == [dead.id]
    job = store.get_job(dead.id)
    assert job.state == "failed" and job.status == "failed: runner died"
    assert job.error.startswith(f"runner died: its process (pid {runner.pid} on {runner.host}) is gone")
    assert job.finished_at is not None
    assert store.get_job(alive.id).state == "running"
    assert fail_dead_jobs(store) == []


def test_a_reused_pid_and_a_silent_other_host_are_gone(store):
    me = this_runner()
    reused = _job(store, Runner(me.host, me.pid, me.started_at - 3600))
    remote_fresh = _job(store, Runner("elsewhere", 1, 1.0))
    remote_silent = _job(store, Runner("elsewhere-too", 1, 1.0))
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=HEARTBEAT_TTL_S / 2)
    store.runners.beat(Runner("elsewhere", 1, 1.0), later, job_id=remote_fresh.id)
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=HEARTBEAT_TTL_S + 5)
    failed = {j.id: j.error for j in fail_dead_jobs(store, now)}
    assert set(failed) == {reused.id, remote_silent.id}
    assert "now belongs to another process" in failed[reused.id]
    assert "no heartbeat from pid 1 on elsewhere-too" in failed[remote_silent.id]
    assert store.get_job(remote_fresh.id).state == "running"


@pytest.fixture(scope="module")
def tvm_libraries() -> tuple[bytes, bytes]:
    """Two libraries TVM built (mlp-tiny, untuned, batch 1 and 2): what a hit must be (library_file)."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import build_library
    from foundation.models.loading import load_model

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    older, newer = (build_library(load_model("mlp-tiny", batch), target, None) for batch in (1, 2))
    return older, newer


def test_a_corrupt_artifact_is_marked_invalid_and_an_intact_one_answers(store, registry_url, tvm_libraries):
    _seed(store)
    fields = dict(model_id="m-1", target=TARGET, fingerprint_id="cpu-1", job_id=None, lib_format="so",
                  latency={"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.0}, untuned_latency_mean_ms=None,
                  validation={"passed": True}, tvm_version="0.27.0", software={})
    # Real libraries of TVM's: a hit must also be one a loader could map and TVM load (library_file).
    older_bytes, newer_bytes = tvm_libraries
    older = store.add_artifact(library=older_bytes, **fields)
    newer = store.add_artifact(library=newer_bytes, **fields)
    assert look_up_hit(store, KEY, TARGET, "cpu-1", "0.27.0", WeightsLayout.PLAIN).artifact == newer
    engine = create_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        connection.execute(text("UPDATE artifacts SET library = :lib WHERE id = :id"),
                           {"lib": newer_bytes + b"damaged", "id": newer.id})
    engine.dispose()
    lookup = look_up_hit(store, KEY, TARGET, "cpu-1", "0.27.0", WeightsLayout.PLAIN)
    assert lookup.artifact == older
    assert [a.id for a in lookup.invalidated] == [newer.id]
    assert "does not match the one validated" in store.get_artifact(newer.id).invalid_reason
    again = look_up_hit(store, KEY, TARGET, "cpu-1", "0.27.0", WeightsLayout.PLAIN)
    assert again.artifact == older and again.invalidated == []


def test_the_tuning_lock_waits_for_a_live_holder_until_it_releases(store):
    holder_runner = Runner(host_name(), 1, process_start_time(1))  # pid 1 lives as long as the box
    theirs = ScopeLock(store, "scope", "mlp batch 1", holder_runner)
    ours = ScopeLock(store, "scope", "mlp batch 1", this_runner())
    assert theirs.try_take() is None and theirs.held
    holder = ours.try_take()
    assert holder is not None and holder.runner == holder_runner and not ours.held
    theirs.name_job("job-theirs")
    threading.Timer(0.5, theirs.release).start()
    last = ours.wait_released(holder, threading.Event(), poll=0.05)
    assert last.job_id == "job-theirs"  # learned while waiting: the job to answer from
    assert ours.try_take() is None and ours.held
    ours.release()
    assert store.runners.get_tuning_lock("scope") is None


def test_the_tuning_lock_of_a_dead_holder_is_taken_over(store, sleeper):
    holder_runner, proc = sleeper
    theirs = ScopeLock(store, "scope", "mlp batch 1", holder_runner)
    ours = ScopeLock(store, "scope", "mlp batch 1", this_runner())
    assert theirs.try_take() is None
    holder = ours.try_take()
    assert holder.runner == holder_runner
    cancelled = threading.Event()
    threading.Timer(0.3, lambda: proc.send_signal(signal.SIGKILL)).start()
    ours.wait_released(holder, cancelled, poll=0.05)  # returns once the holder is gone
    proc.wait()
    assert ours.try_take() is None and ours.held
    assert store.runners.get_tuning_lock("scope").runner == this_runner()


def test_a_job_keeps_the_untuned_build_when_its_tuned_library_is_slower():
    from foundation.domain.untuned_speed import speed_check
    from foundation.job_driver.driver import library_to_keep
    from foundation.runtime.library_runner import Latency

    tuned, untuned = Latency(25.3, 25.0, 27.0, 4000, 3), Latency(9.34, 9.3, 0.5, 4000, 3)
    slower = speed_check([[25.0]], [[9.3]])
    kept = library_to_keep(tuned, WeightsLayout.PREPACKED_NCHWC, untuned, slower)
    assert (kept.untuned, kept.latency, kept.weights_layout) == (True, untuned, WeightsLayout.PLAIN)
    assert kept.speed.kept_untuned and kept.speed.slower_than_untuned
    assert "KEPT THE UNTUNED BUILD" in kept.status and "2.69x" in kept.status
    faster = speed_check([[9.3]], [[25.0]])
    kept = library_to_keep(untuned, WeightsLayout.PREPACKED_NCHWC, tuned, faster)
    assert (kept.untuned, kept.weights_layout, kept.speed.kept_untuned) == (False, WeightsLayout.PREPACKED_NCHWC,
                                                                           False)
    # Not timed against the untuned build (validated against its outputs only): nothing to decide.
    assert not library_to_keep(tuned, WeightsLayout.PLAIN, None, None).untuned


def test_a_job_status_says_its_latency_in_the_unit_that_fits():
    from foundation.domain.untuned_speed import speed_check
    from foundation.job_driver.driver import library_to_keep
    from foundation.runtime.library_runner import Latency

    tuned, untuned = Latency(41.866, 41.5, 0.4, 4000, 3), Latency(0.8123, 0.81, 0.01, 4000, 3)
    kept = library_to_keep(tuned, WeightsLayout.PLAIN, None, None)
    assert kept.status == "succeeded: 41.9 ms mean"
    kept = library_to_keep(tuned, WeightsLayout.PLAIN, untuned, speed_check([[41.5]], [[0.81]]))
    assert kept.status.endswith("(41.5 ms against 810 us median); 812 us mean"), kept.status


def test_asked_to_keep_slower_libraries_a_job_stores_its_tuned_one_and_says_it_is_slower():
    from foundation.domain.untuned_speed import speed_check
    from foundation.job_driver.driver import library_to_keep
    from foundation.runtime.library_runner import Latency

    tuned, untuned = Latency(25.3, 25.0, 27.0, 4000, 3), Latency(9.34, 9.3, 0.5, 4000, 3)
    kept = library_to_keep(tuned, WeightsLayout.PREPACKED, untuned, speed_check([[25.0]], [[9.3]]), fallback=False)
    assert (kept.untuned, kept.weights_layout) == (False, WeightsLayout.PREPACKED)
    assert kept.speed.slower_than_untuned and not kept.speed.kept_untuned
    assert "SLOWER THAN THE UNTUNED BUILD" in kept.status and "FARM_KEEP_SLOWER_TUNED" in kept.status
