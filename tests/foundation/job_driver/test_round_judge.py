"""A round's judge times the model on every core, whatever the calling thread's pool was left at:
the pool is per thread, and a notebook that ran `farm.load(..., threads=1)` on the thread that
then tunes `--until` left that thread's pool on one."""

from __future__ import annotations

import pytest

from foundation.domain.tuning_rounds import parse_goal
from foundation.hardware.fingerprint import available_cores
from foundation.job_driver.tuning_rounds import RoundJudge

pytestmark = pytest.mark.skipif(available_cores() < 2, reason="needs two cores to tell one thread from every core")


@pytest.fixture(scope="module")
def mlp_tiny():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import build_library
    from foundation.models.loading import load_model

    loaded = load_model("mlp-tiny", 2)
    target = tvm.target.Target({"kind": "llvm", "num-cores": available_cores()})
    return loaded, build_library(loaded, target, None)


def test_the_judge_times_on_every_core_after_a_one_thread_load_on_its_thread(mlp_tiny):
    import tvm

    from foundation.runtime.threads import use_threads

    loaded, library = mlp_tiny
    use_threads(1)  # what farm.load(..., threads=1) leaves on the calling thread
    pool_size = tvm.get_global_func("runtime.NumThreads")
    assert pool_size() == 1
    goal = parse_goal("1000ms")
    comparison = RoundJudge(goal, goal.latency_ms, None, loaded, seed=0).judge(library, "llvm")
    assert comparison.beats  # a tiny MLP well under a second
    assert pool_size() == available_cores()
