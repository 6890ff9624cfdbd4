"""A Python caller of farm.submit interrupted by Ctrl-C: the caller gets its KeyboardInterrupt, the job ends cancelled.

A real script in a process group of its own, and SIGINT to the whole group, as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.farm_process import FarmProcess, RegistryProbe, farm_env
from support.polling import wait_for

pytestmark = pytest.mark.slow

# Far more trials than the test waits for: the tune is stopped while it measures. With a second
# argument (a file), another farm.submit of this process holds its turn (the TVM IR lock) and the
# submit waits for it, before any job of its own, saying so in the file.
CALLER = textwrap.dedent("""
    import logging, sys, threading
    import farm

    if len(sys.argv) > 2:
        from foundation.tvm_ir_lock import TVM_IR_LOCK

        class Told(logging.Handler):
            def emit(self, record):
                open(sys.argv[2], "w").write(record.getMessage())

        logging.getLogger("farm.embedded").addHandler(Told(logging.INFO))
        logging.getLogger("farm.embedded").setLevel(logging.INFO)
        holding = threading.Event()
        threading.Thread(target=lambda: (TVM_IR_LOCK.acquire(), holding.set(), threading.Event().wait()),
                         daemon=True).start()
        holding.wait()
    try:
        farm.submit("mlp-tiny", "llvm", 2, trials=96, trials_per_task=48, runs=2, registry=sys.argv[1])
    except KeyboardInterrupt as err:
        print(f"caller got KeyboardInterrupt: {err}")
        sys.exit(0)
    except BaseException as err:
        print(f"caller got {type(err).__name__}: {err}")
        sys.exit(1)
    print("farm.submit returned")
""")
# A background submit (wait=False) that the caller waits for; its job cannot outlive the process.
WAITING_ON_A_HANDLE = textwrap.dedent("""
    import sys
    import farm

    handle = farm.submit("mlp-tiny", "llvm", 2, trials=96, trials_per_task=48, runs=2, registry=sys.argv[1],
                         wait=False)
    try:
        handle.wait()
    except KeyboardInterrupt:
        print("caller got KeyboardInterrupt")
        sys.exit(0)
    print("the job ended")
""")
FIRST_BATCH = 16  # MetaSchedule measures 16 candidates a batch at this budget


@pytest.fixture
def probe(registry_url):
    probe = RegistryProbe(registry_url)
    yield probe
    probe.dispose()


def _caller(tmp_path: Path, *args: str, script: str = CALLER) -> FarmProcess:
    return FarmProcess(subprocess.Popen([sys.executable, "-c", script, *args], env=farm_env(tmp_path / "home"),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True))


def _interrupted(caller: FarmProcess) -> tuple[str, str]:
    """Ctrl-C, and what the caller printed: it exits 0 only where it caught KeyboardInterrupt."""
    caller.interrupt_group(signal.SIGINT)
    code, out, err = caller.finish(timeout=180)
    assert code == 0 and out.startswith("caller got KeyboardInterrupt: "), f"exit {code}\n{out}\n{err[-3000:]}"
    assert "farm.submit: SIGINT: stopping after the batch in flight" in err and "Traceback" not in err, err[-3000:]
    return out.strip(), err


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_ctrl_c_raises_keyboard_interrupt_in_the_caller_and_cancels_the_job(tmp_path, registry_url, probe):
    caller = _caller(tmp_path, registry_url)
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        out, _ = _interrupted(caller)
    finally:
        caller.kill()
    assert out == (f"caller got KeyboardInterrupt: interrupted by SIGINT: job {job_id} was cancelled, its measured "
                   f"records kept (farm.status({job_id!r}) shows it; the same submit continues from them)")
    job = probe.job(job_id)
    assert job["state"] == "cancelled", job
    assert probe.records_of(job_id) == job["trials_done"] >= committed
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_ctrl_c_while_the_job_is_planned_cancels_it(tmp_path, registry_url, probe):
    caller = _caller(tmp_path, registry_url)
    try:
        job_id = wait_for(probe.newest_job, 120, "the job's row", interval=0.05)
        out, _ = _interrupted(caller)
    finally:
        caller.kill()
    assert out.startswith(f"caller got KeyboardInterrupt: interrupted by SIGINT: job {job_id} was cancelled"), out
    job = probe.job(job_id)
    assert job["state"] == "cancelled", job
    assert probe.records_of(job_id) == job["trials_done"]
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_ctrl_c_before_any_job_started_says_nothing_was_written(tmp_path, registry_url, probe):
    told = tmp_path / "waiting.txt"
    caller = _caller(tmp_path, registry_url, str(told))
    try:
        wait_for(told.exists, 120, "the submit waiting for its turn", interval=0.1)
        out, _ = _interrupted(caller)
    finally:
        caller.kill()
    assert "waiting for it to end" in told.read_text()
    assert out == "caller got KeyboardInterrupt: interrupted by SIGINT before any job started: nothing was written"
    assert probe.scalar("SELECT COUNT(*) FROM jobs") == 0


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_ctrl_c_while_waiting_on_a_background_submit_ends_the_process_and_cancels_the_job(tmp_path, registry_url,
                                                                                          probe):
    caller = _caller(tmp_path, registry_url, script=WAITING_ON_A_HANDLE)
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        caller.interrupt_group(signal.SIGINT)
        code, out, err = caller.finish(timeout=180)
    finally:
        caller.kill()
    assert (code, out.strip()) == (0, "caller got KeyboardInterrupt"), f"exit {code}\n{out}\n{err[-3000:]}"
    assert f"farm.submit: the process is exiting: {job_id} stops after the batch in flight" in err, err[-3000:]
    job = probe.job(job_id)
    assert job["state"] == "cancelled", job
    assert probe.records_of(job_id) == job["trials_done"] >= committed
    assert job["trials_done"] < 96, "the exit waited for the whole tune"
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0
