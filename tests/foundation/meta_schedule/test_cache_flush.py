"""CPU candidates timed with their weights flushed from the caches (FARM_CPU_CACHE_FLUSH): one call
a repeat after TVM's flush, on the local device and through a real RPC tracker and server; off by
default, and never for GPUs."""

from __future__ import annotations

import pytest

from foundation.config import CPU_CACHE_FLUSH_ENV, MIN_REPEAT_MS_ENV
from foundation.meta_schedule.measure import CACHE_FLUSH_REPEATS, MeasureSettings, RPCMeasure, WorkerPools

from support.tvm_records import build_and_time, matmul_module

HOST = "127.0.0.1"
KEY = "cpu-cache-flush-test"


def test_flushed_cpu_candidates_run_once_a_repeat_and_gpus_are_never_flushed(monkeypatch):
    monkeypatch.delenv(MIN_REPEAT_MS_ENV, raising=False)  # the suite's own (tests/conftest.py), not the default
    flushed = MeasureSettings(cache_flush=True).evaluator_config("llvm")
    assert (flushed.number, flushed.repeat, flushed.min_repeat_ms, flushed.enable_cpu_cache_flush) == (
        1, CACHE_FLUSH_REPEATS, 0, True)
    warm = MeasureSettings(cache_flush=False).evaluator_config("llvm")
    assert (warm.number, warm.repeat, warm.min_repeat_ms, warm.enable_cpu_cache_flush) == (3, 1, 40, False)
    gpu = MeasureSettings(cache_flush=True).evaluator_config("cuda")
    assert not gpu.enable_cpu_cache_flush and gpu.min_repeat_ms == 40


@pytest.mark.parametrize(("value", "flushed"), [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_the_environment_chooses_the_default(monkeypatch, value, flushed):
    if value is None:
        monkeypatch.delenv(CPU_CACHE_FLUSH_ENV, raising=False)
    else:
        monkeypatch.setenv(CPU_CACHE_FLUSH_ENV, value)
    assert MeasureSettings().cache_flush is flushed
    assert MeasureSettings(cache_flush=not flushed).cache_flush is not flushed  # an explicit choice wins


@pytest.fixture(scope="module")
def target():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


def test_a_flushed_local_measurement_times_each_call_after_the_flush(target):
    mod = matmul_module(256)
    with WorkerPools(MeasureSettings(cache_flush=True)) as pools:
        builder, runner = pools.get("llvm")
        run_secs, _ = build_and_time(builder, runner, mod, target)
    assert len(run_secs) == CACHE_FLUSH_REPEATS and all(s > 0 for s in run_secs), run_secs
    with WorkerPools(MeasureSettings(cache_flush=False, min_repeat_ms=1)) as pools:
        builder, runner = pools.get("llvm")
        warm, _ = build_and_time(builder, runner, mod, target)
    assert len(warm) == 1 and warm[0] > 0


@pytest.mark.slow
def test_a_flushed_measurement_through_the_tracker_runs_on_the_rpc_server(target):
    # The flush runs where the candidate runs: the server's session must have TVM's flush function.
    from agent.rpc_server import SupervisedRPCServer
    from foundation.rpc.tracker import TrackerProcess

    with TrackerProcess(host=HOST, port=0) as tracker:
        with SupervisedRPCServer(HOST, tracker.port, KEY, host=HOST, port=0, check_interval=1.0,
                                 restart_grace=4.0, start_timeout=20.0) as server:
            server.wait_until_serving(timeout=30)
            settings = MeasureSettings(cache_flush=True, rpc=RPCMeasure(HOST, tracker.port, KEY))
            with WorkerPools(settings) as pools:
                builder, runner = pools.get("llvm")
                run_secs, _ = build_and_time(builder, runner, matmul_module(128), target)
    assert len(run_secs) == CACHE_FLUSH_REPEATS and all(s > 0 for s in run_secs), run_secs
