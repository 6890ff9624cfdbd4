"""A Python caller of farm.submit interrupted by Ctrl-C: the caller gets its KeyboardInterrupt, the job ends cancelled.

A real script in a process group of its own, and SIGINT to the whole group, as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from support.farm_process import FarmProcess, RegistryProbe, farm_env

pytestmark = pytest.mark.slow

# Far more trials than the test waits for: the tune is stopped while it measures.
CALLER = textwrap.dedent("""
    import sys
    import farm

    try:
        farm.submit("mlp-tiny", "llvm", 2, trials=96, trials_per_task=48, runs=2, registry=sys.argv[1])
    except KeyboardInterrupt:
        print("caller got KeyboardInterrupt")
        sys.exit(0)
    except BaseException as err:
        print(f"caller got {type(err).__name__}: {err}")
        sys.exit(1)
    print("farm.submit returned")
""")
FIRST_BATCH = 16  # MetaSchedule measures 16 candidates a batch at this budget


@pytest.fixture
def probe(registry_url):
    probe = RegistryProbe(registry_url)
    yield probe
    probe.dispose()


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_ctrl_c_raises_keyboard_interrupt_in_the_caller_and_cancels_the_job(tmp_path, registry_url, probe):
    caller = FarmProcess(subprocess.Popen([sys.executable, "-c", CALLER, registry_url], env=farm_env(tmp_path / "home"),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
    try:
        job_id, committed = probe.wait_for_records(FIRST_BATCH)
        caller.interrupt_group(signal.SIGINT)
        code, out, err = caller.finish(timeout=180)
    finally:
        caller.kill()
    assert (code, out.strip()) == (0, "caller got KeyboardInterrupt"), err[-3000:]
    assert "farm.submit: SIGINT: stopping after the batch in flight" in err and "Traceback" not in err, err[-3000:]
    job = probe.job(job_id)
    assert job["state"] == "cancelled", job
    assert probe.records_of(job_id) == job["trials_done"] >= committed
    assert probe.scalar("SELECT COUNT(*) FROM tuning_locks") == 0
