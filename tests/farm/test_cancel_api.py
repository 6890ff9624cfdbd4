"""farm.cancel: the registry's jobs as `farm cancel` cancels them, from Python."""

from __future__ import annotations

import os
import subprocess

import pytest

import farm
from foundation.domain.jobs import JobState
from foundation.errors import BadInput, FarmError

from support.polling import wait_for

pytestmark = pytest.mark.slow


def test_a_job_another_process_runs_is_cancelled_and_a_finished_one_is_left(tuned_mlp_tiny, tmp_path, farm_exe):
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    registry = f"sqlite:///{home / 'registry.db'}"
    (done,) = farm.jobs(registry=registry)
    assert farm.cancel(done.id, registry=registry) == done  # final already: nothing to cancel
    with pytest.raises(FarmError) as unknown:
        farm.cancel("job-nope", registry=registry)
    assert unknown.value.exit_code == 3
    with pytest.raises(BadInput, match="wait must be a number of seconds"):
        farm.cancel(done.id, registry=registry, wait=-1)

    submit = subprocess.Popen([farm_exe, "submit", "mlp-tiny", "llvm", "3", "--trials", "400", "--runs", "2",
                               "--registry", registry], env={**os.environ, "FARM_HOME": str(home)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        running = wait_for(lambda: next((j for j in farm.jobs(registry=registry) if j.state is JobState.RUNNING),
                                        None), timeout=240, what="the submit to start tuning")
        cancelled = farm.cancel(running.id, registry=registry, wait=240)
        assert cancelled.state is JobState.CANCELLED and "farm cancel" in cancelled.error
        assert submit.wait(timeout=240) == 1, submit.stderr.read()
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.wait()
