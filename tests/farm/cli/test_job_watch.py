"""`farm wait JOB` and `farm status JOB --watch`: they follow a job to its end and exit as it ended
(0 succeeded, 1 failed or cancelled, 5 timed out), on the registry and through a coordinator."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess

import grpc
import pytest

from coordinator.server import serve
from farm.registry_jobs import RegistryJobs
from foundation.registry import RegistryStore
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import FarmProcess, farm_env

STATES = ("succeeded", "failed", "cancelled", "queued")


@pytest.fixture
def jobs(registry_url) -> dict[str, str]:
    """A registry holding one job in each of STATES (the queued one has no process to run it: it
    stays queued until cancelled); their ids by state."""
    store = RegistryStore(registry_url, create=True)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        store.upsert_model(model_id="model-1", name="mlp-tiny", source="zoo", source_digest="v1", batch=1, inputs=[],
                           weights=[], num_parameters=1)
        return {state: store.create_job(model_id="model-1", target='{"kind":"llvm"}', fingerprint_id="cpu-aaaa",
                                        trials_budget=0, options={}, state=state).id for state in STATES}
    finally:
        store.dispose()


def _farm(tmp_path, *args: str):
    return run_farm_inprocess(*args, home=tmp_path / "home")


def _one_error_line(result, start: str) -> None:
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {start}"), result.stderr


@pytest.mark.parametrize("command", [["wait"], ["status", "--watch", "--interval", "0.1"]])
def test_a_succeeded_job_exits_0_with_the_document_status_prints(tmp_path, registry_url, jobs, command):
    job = jobs["succeeded"]
    shown = _farm(tmp_path, "status", job, "--registry", registry_url, "--json")
    waited = _farm(tmp_path, *command[:1], job, *command[1:], "--registry", registry_url, "--json")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout) == json.loads(shown.stdout)
    plain = _farm(tmp_path, *command[:1], job, *command[1:], "--registry", registry_url)
    assert plain.returncode == 0 and "Job:" in plain.stdout and job in plain.stdout


@pytest.mark.parametrize("state", ["failed", "cancelled"])
@pytest.mark.parametrize("command", [["wait"], ["status", "--watch"]])
def test_a_failed_or_cancelled_job_exits_1(tmp_path, registry_url, jobs, state, command):
    result = _farm(tmp_path, *command[:1], jobs[state], *command[1:], "--registry", registry_url, "--json")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["job"] == jobs[state] and document["state"] == state and document["exit_code"] == 1
    _one_error_line(result, f"job {jobs[state]} {state}")


@pytest.mark.parametrize("command", [["wait"], ["status", "--watch", "--interval", "0.1"]])
def test_a_timeout_exits_5_and_the_job_goes_on(tmp_path, registry_url, jobs, command):
    job = jobs["queued"]
    result = _farm(tmp_path, *command[:1], job, *command[1:], "--timeout", "0.3", "--registry", registry_url, "--json")
    assert result.returncode == 5
    assert json.loads(result.stdout)["state"] == "queued"
    _one_error_line(result, f"job {job} is still queued after 0.3 s")


def test_watch_writes_a_line_per_change_and_ends_with_the_job(tmp_path, registry_url, jobs, farm_exe):
    """Through a pipe: the queued job's line, then, once it is cancelled elsewhere, its last line
    and the job in full; the exit code of a cancelled job."""
    job = jobs["queued"]
    watching = FarmProcess.start(farm_exe, tmp_path / "home", "status", job, "--watch", "--interval", "0.1",
                                 "--registry", registry_url)
    try:
        first = watching.proc.stdout.readline()
        assert first.startswith(f"{job}  queued"), first
        store = RegistryStore(registry_url)
        try:
            RegistryJobs(store).cancel(job, 0)
        finally:
            store.dispose()
        code, out, err = watching.finish(timeout=60)
    finally:
        watching.kill()
    assert code == 1, err
    assert out.splitlines()[0].startswith(f"{job}  cancelled")
    assert "State:" in out
    assert err.startswith(f"error: job {job} cancelled")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_wait_not_the_job(tmp_path, registry_url, jobs, farm_exe, sig):
    job = jobs["queued"]
    watching = FarmProcess.start(farm_exe, tmp_path / "home", "status", job, "--watch", "--interval", "0.1",
                                 "--registry", registry_url)
    try:
        assert watching.proc.stdout.readline().startswith(job)  # it is waiting
        watching.interrupt_group(sig)
        code, _, err = watching.finish(timeout=60)
    finally:
        watching.kill()
    assert code == 128 + sig
    assert err == "error: stopped waiting (the job goes on; `farm status JOB` shows it)\n"
    assert _farm(tmp_path, "status", job, "--registry", registry_url, "--json").stdout.count('"queued"') == 1


@pytest.mark.parametrize("args", [["--timeout", "-1"], ["--timeout", "nan"], ["--timeout", "soon"]])
def test_a_bad_timeout_is_refused(tmp_path, args):
    result = _farm(tmp_path, "wait", "job-0123456789", *args)
    assert result.returncode == 2
    _one_error_line(result, "invalid value for '--timeout'")


@pytest.mark.parametrize("args", [["--interval", "0"], ["--interval", "inf"], ["--timeout", "-2"]])
def test_a_bad_interval_or_timeout_of_watch_is_refused(tmp_path, args):
    result = _farm(tmp_path, "status", "job-0123456789", "--watch", *args)
    assert result.returncode == 2
    _one_error_line(result, "invalid value for '--")


@pytest.mark.parametrize("command", [["wait"], ["status", "--watch"]])
def test_an_unknown_job_is_not_found(tmp_path, registry_url, jobs, command):
    result = _farm(tmp_path, *command[:1], "job-0123456789", *command[1:], "--registry", registry_url)
    assert result.returncode == 3
    _one_error_line(result, "")


@pytest.fixture
def coordinator_address(tmp_path, registry_url, jobs) -> str:
    server = serve(listen="127.0.0.1:0", registry_url=registry_url, tracker="127.0.0.1:9190",
                   heartbeat_interval=0.5, lease_ttl=30.0, tick_interval=0.1, data_dir=tmp_path / "coordinator")
    yield server.address
    server.stop(grace=1)


def test_a_coordinators_job_is_waited_for(tmp_path, coordinator_address, jobs, farm_exe):
    where = ("--coordinator", coordinator_address)
    succeeded = _farm(tmp_path, "wait", jobs["succeeded"], *where, "--json")
    assert succeeded.returncode == 0, succeeded.stderr
    assert json.loads(succeeded.stdout)["state"] == "succeeded"
    assert _farm(tmp_path, "wait", jobs["failed"], *where).returncode == 1
    assert _farm(tmp_path, "wait", "job-0123456789", *where).returncode == 3
    # A job that the coordinator ends while the watch goes on: cancelled through its API.
    job = jobs["queued"]
    watching = FarmProcess.start(farm_exe, tmp_path / "home", "status", job, "--watch", "--interval", "0.1", *where)
    try:
        assert watching.proc.stdout.readline().startswith(job)
        with grpc.insecure_channel(coordinator_address) as channel:
            farm_pb2_grpc.FarmClientStub(channel).CancelJob(farm_pb2.CancelJobRequest(job_id=job), timeout=30)
        code, out, err = watching.finish(timeout=60)
    finally:
        watching.kill()
    assert code == 1, err
    assert f"{job}  cancelled" in out


def test_on_a_terminal_watch_redraws_the_job(tmp_path, registry_url, jobs, farm_exe):
    leader, follower = pty.openpty()
    with subprocess.Popen([farm_exe, "status", jobs["succeeded"], "--watch", "--interval", "0.1", "--registry",
                           registry_url], env=farm_env(tmp_path / "home"), stdout=follower,
                          stderr=subprocess.PIPE) as watching:
        os.close(follower)
        screen = b""
        while chunk := _read(leader):
            screen += chunk
        assert watching.wait(timeout=60) == 0
    os.close(leader)
    text = screen.decode()
    assert text.startswith("\x1b[H\x1b[2Jevery 0.1 s: farm status " + jobs["succeeded"])
    assert "State:" in text and text.count("State:") == 1  # drawn once, not printed again at the end


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # the terminal's other end closed: EIO on Linux
        return b""
