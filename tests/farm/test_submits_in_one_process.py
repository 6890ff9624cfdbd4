"""Several threads of one process calling farm.submit at once: each job ends as it would alone."""

from __future__ import annotations

import threading

import pytest

import farm
from foundation.domain.jobs import JobState

pytestmark = pytest.mark.slow


def test_two_threads_submitting_at_once_both_succeed_and_a_third_of_the_same_scope_is_a_hit(tmp_path, caplog):
    """Two threads' jobs at once failed in Relax's block builder ("DataflowVar matmul is not defined") or their
    tuning ("TensorIntrin 'dot_16x4_vnni' is not registered"); they run one at a time, the waiting one says so."""
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    ended: dict[str, farm.Job] = {}
    failed: dict[str, BaseException] = {}

    def submit(name: str, batch: int) -> None:
        try:
            ended[name] = farm.submit("mlp-tiny", "llvm", batch, trials_per_task=2, runs=2, build_workers=1,
                                      registry=registry)
        except BaseException as err:  # reported below, by the test
            failed[name] = err

    threads = [threading.Thread(target=submit, args=(name, batch))
               for name, batch in (("first", 1), ("other batch", 2), ("same scope", 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    assert not failed, failed
    assert "another farm.submit in this process is running its job: waiting for it to end" in caplog.text
    assert all(job.state is JobState.SUCCEEDED for job in ended.values()), ended
    batch_1 = [ended["first"], ended["same scope"]]
    # One tuned batch 1; the other waited for it and answered from the registry.
    assert sorted(job.cache_hit for job in batch_1) == [False, True]
    assert batch_1[0].artifact.id == batch_1[1].artifact.id
    assert not ended["other batch"].cache_hit and ended["other batch"].artifact.id != batch_1[0].artifact.id
