"""Nothing lost, nothing stuck: `farm submit` interrupted, terminated, killed, cancelled, while it measures.

Real processes and real signals: SIGINT goes to the whole process group, as a terminal's Ctrl-C
does; SIGTERM and SIGKILL to the farm process, as `kill` and the OOM killer do. What another shell
does meanwhile (`farm jobs`, `status`, `cancel`) reads and writes the registry the submit uses, not
the submit's process: it runs in this process (support.farm_inprocess), sparing a Python and
import start-up a call, a second of CPU beside the tune it watches.
"""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import FarmProcess, RegistryProbe, json_document, one_error_line, run_farm
from support.polling import wait_for

pytestmark = pytest.mark.slow

# Far more than the test waits for (96 trials; it waits for 16): each tune is stopped while it
# measures. Under 64 trials a task, the search evolves a population of 4 candidates a trial
# (foundation.meta_schedule.planned_search): a batch takes a second or two, where at 200 a task
# the full 512 took 8 s a batch, most of each test's time and CPU.
LONG_TUNE = ["mlp-tiny", "llvm", "2", "--trials", "96", "--trials-per-task", "48", "--runs", "2"]
SHORT_TUNE = ["mlp-tiny", "llvm", "2", "--trials", "16", "--trials-per-task", "8", "--runs", "2"]
FIRST_BATCH = 16  # MetaSchedule measures 16 candidates a batch at this budget


@pytest.fixture
def probe(registry_url):
    probe = RegistryProbe(registry_url)
    yield probe
    probe.dispose()


def _all_gone(pids: list[int], timeout: float = 30) -> bool:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _started_as_new_pythons(pids: list[int]) -> list[list[str]]:
    found = []
    for pid in pids:
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.NoSuchProcess:
            continue
        if {"foundation.meta_schedule.forked_workers", "tvm.exec.popen_worker"} & set(cmdline):
            found.append(cmdline)
    return found


def _submit(farm_exe, tmp_path, registry_url, *args) -> FarmProcess:
    return FarmProcess.start(farm_exe, tmp_path / "home", "submit", *args, "--registry", registry_url)


def _jobs(tmp_path, registry_url) -> dict[str, dict]:
    listed = run_farm_inprocess("jobs", "--registry", registry_url, "--json", home=tmp_path / "home")
    assert listed.returncode == 0, listed.stderr
    return {j["id"]: j for j in json_document(listed.stdout)}


def _listed_with_trials(tmp_path, registry_url, job_id: str, at_least: int) -> dict | None:
    job = _jobs(tmp_path, registry_url)[job_id]
    return job if job["trials_done"] >= at_least else None


def test_ctrl_c_cancels_after_the_batch_in_flight_and_keeps_every_record(farm_exe, tmp_path, registry_url, probe):
    farm = _submit(farm_exe, tmp_path, registry_url, *LONG_TUNE, "--json")
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        workers = farm.descendants()
        assert workers, "the tune runs builder and runner workers"
        # Their zygote is a fork of the farm process (forked_workers.fork_zygote_here), not a new Python.
        assert _started_as_new_pythons(workers) == []
        farm.interrupt_group(signal.SIGINT)
        code, out, err = farm.finish(timeout=180)
    finally:
        farm.kill()
    line = one_error_line(err)  # no segfault report, no "cannot join current thread", no traceback
    assert code == 130, err
    assert line.startswith(f"error: job {job_id} cancelled (interrupted by SIGINT after ")
    document = json_document(out)
    assert document["exit_code"] == 130 and document["job"] == job_id and document["state"] == "cancelled"
    job = probe.job(job_id)
    assert job["state"] == "cancelled"
    # Every measured candidate is in the registry: those committed before the signal and the batch in flight.
    assert probe.records_of(job_id) == job["trials_done"] == document["trials"] >= committed
    assert _jobs(tmp_path, registry_url)[job_id]["state"] == "cancelled"
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0
    assert _all_gone(workers), "worker processes outlived the interrupted submit"


def test_sigterm_cancels_the_same_way_with_143(farm_exe, tmp_path, registry_url, probe):
    farm = _submit(farm_exe, tmp_path, registry_url, *LONG_TUNE)
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        farm.proc.send_signal(signal.SIGTERM)
        code, out, err = farm.finish(timeout=180)
    finally:
        farm.kill()
    assert code == 143, err
    assert err.splitlines()[-1].startswith(f"error: job {job_id} cancelled (interrupted by SIGTERM after ")
    assert "Traceback" not in err and "Segfault" not in err
    assert probe.job(job_id)["state"] == "cancelled" and probe.records_of(job_id) >= committed


def test_a_second_ctrl_c_stops_at_once_and_leaves_no_running_job(farm_exe, tmp_path, registry_url, probe):
    # One builder: the next batch's 16 builds take seconds, one after another. The first signal is
    # sent half a second after a batch was committed, so that it lands in the next batch's search
    # or builds: landed in the moment between two batches (the cost model's update, tens of
    # milliseconds), the tuner's check for a cancel comes at once and the job ends before the
    # second signal (CI, 2026-11-28: "cancelled ... after 18 trials", no "stopped at once").
    farm = _submit(farm_exe, tmp_path, registry_url, *LONG_TUNE, "--build-workers", "1", "--json")
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        time.sleep(0.5)
        farm.interrupt_group(signal.SIGINT)
        # Long enough for the first signal to be taken apart from the second (the kernel merges
        # a signal sent while the same one is pending), short enough that the batch in flight
        # has not ended the job yet.
        time.sleep(0.05)
        begin = time.monotonic()
        farm.interrupt_group(signal.SIGINT)
        code, out, err = farm.finish(timeout=60)
        took = time.monotonic() - begin
    finally:
        farm.kill()
    assert code == 130 and took < 10, (code, took, err)
    assert "stopped at once" in one_error_line(err)
    state = _jobs(tmp_path, registry_url)[job_id]["state"]
    assert state in ("cancelled", "failed"), state  # cancelled by its last words, or found dead
    assert probe.records_of(job_id) >= committed


def test_a_killed_submit_is_failed_on_the_next_read_and_the_next_submit_takes_over(
        farm_exe, tmp_path, registry_url, probe):
    farm = _submit(farm_exe, tmp_path, registry_url, *LONG_TUNE, "--json")
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        workers = farm.descendants()
        farm.proc.send_signal(signal.SIGKILL)  # the farm process alone, as the OOM killer does
        farm.proc.wait(timeout=30)
    finally:
        farm.kill()
    assert probe.job(job_id)["state"] == "running"  # nobody has looked yet
    listed = _jobs(tmp_path, registry_url)[job_id]
    assert listed["state"] == "failed" and listed["error"].startswith("runner died: its process")
    assert probe.records_of(job_id) >= committed, "the records it committed were lost"
    status = run_farm_inprocess("status", job_id, "--registry", registry_url, "--json", home=tmp_path / "home")
    assert status.returncode == 0 and json_document(status.stdout)["state"] == "failed"
    assert _all_gone(workers, timeout=60), "the killed submit's workers stayed behind"
    # Its tuning lock is still in the table; the next submit judges its holder dead and tunes.
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 1
    again = run_farm(farm_exe, tmp_path / "home", "submit", *SHORT_TUNE, "--registry", registry_url, "--json")
    assert again.returncode == 0, again.stderr
    assert json_document(again.stdout)["state"] == "succeeded"
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0


def test_farm_cancel_stops_a_submit_running_in_another_process(farm_exe, tmp_path, registry_url, probe):
    farm = _submit(farm_exe, tmp_path, registry_url, *LONG_TUNE, "--json")
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        # Another shell sees the running job's progress: its heartbeat writes the trials measured so far.
        running = wait_for(lambda: _listed_with_trials(tmp_path, registry_url, job_id, FIRST_BATCH),
                           30, "`farm jobs` to show the trials measured", interval=1)
        cancelled = run_farm_inprocess("cancel", job_id, "--registry", registry_url, "--json", home=tmp_path / "home")
        code, out, err = farm.finish(timeout=180)
    finally:
        farm.kill()
    assert cancelled.returncode == 0, cancelled.stderr
    assert json_document(cancelled.stdout)["state"] == "cancelled"
    assert code == 1 and "cancelled by `farm cancel`" in one_error_line(err)
    assert probe.job(job_id)["state"] == "cancelled" and probe.records_of(job_id) >= committed
    assert running["state"] == "running" and running["trials_done"] <= probe.records_of(job_id)


def test_the_same_job_twice_is_tuned_once(farm_exe, tmp_path, registry_url, probe):
    first = _submit(farm_exe, tmp_path, registry_url, *SHORT_TUNE, "--json")
    try:
        wait_for(probe.newest_job, 300, "the first submit's job", interval=0.2)
        second = _submit(farm_exe, tmp_path, registry_url, *SHORT_TUNE)
        first_code, first_out, first_err = first.finish(timeout=600)
        second_code, second_out, second_err = second.finish(timeout=600)
    finally:
        first.kill()
        second.kill()
    assert first_code == 0 and second_code == 0, (first_err, second_err)
    tuned = json_document(first_out)
    assert "is tuning mlp-tiny batch 2 for this target: waiting for it to finish" in second_err
    assert "registry hit" in second_out and tuned["artifact"]["id"] in second_out
    assert probe.scalar("SELECT COUNT(*) FROM jobs WHERE cache_hit = false") == 1
    assert probe.scalar("SELECT COUNT(*) FROM artifacts") == 1
