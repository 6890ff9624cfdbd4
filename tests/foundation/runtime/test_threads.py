"""How many threads a loaded library runs on: auto's choice, an explicit count, bad input, and the
process's TVM pool really resized before a library runs."""

import numpy as np
import pytest

from foundation.errors import BadInput
from foundation.runtime.busy_backoff import SLOW_IN_A_ROW
from foundation.runtime.threads import SERIAL_BELOW_MS, SERIAL_COSTS_AT_MOST, parse_threads, threads_for, timed_threads


def test_auto_runs_a_microsecond_library_serially_and_a_larger_one_on_every_core():
    assert threads_for("auto", 0.004, cores=8) == 1
    assert threads_for(None, SERIAL_BELOW_MS / 2, cores=8) == 1
    assert threads_for("auto", SERIAL_BELOW_MS, cores=8) == 8
    assert threads_for("auto", 30.0, cores=2) == 2
    assert threads_for("auto", None, cores=4) == 4  # nothing stored: every core, as tuned


def test_validation_runs_serially_only_what_one_thread_runs_fast_and_at_little_cost():
    # Microseconds, a second thread buying nothing or little: serial.
    assert timed_threads(0.033, 0.029, cores=2) == 1
    assert timed_threads(0.4, 0.4 * SERIAL_COSTS_AT_MOST, cores=2) == 1
    # Under SERIAL_BELOW_MS on every core, but one thread would cost 1.9x: every core.
    assert timed_threads(0.97, 1.84, cores=2) == 2
    assert timed_threads(0.3, 0.3 * SERIAL_COSTS_AT_MOST * 1.01, cores=8) == 8
    # Serial only under SERIAL_BELOW_MS on one thread, however little every core buys.
    assert timed_threads(0.9, SERIAL_BELOW_MS, cores=2) == 2
    assert timed_threads(30.0, None, cores=2) == 2  # not timed on one thread: every core


def test_auto_follows_the_threads_validation_stored_over_the_latency():
    assert threads_for("auto", 0.5, cores=8, stored_threads=8) == 8
    assert threads_for("auto", 0.5, cores=4, stored_threads=2) == 4  # "every core" on the box it loads on
    assert threads_for("auto", 30.0, cores=8, stored_threads=1) == 1
    assert threads_for(3, 0.5, cores=8, stored_threads=1) == 3  # a count asked for wins


def test_an_explicit_count_wins_whatever_was_stored():
    assert threads_for(3, 0.004, cores=2) == 3
    assert threads_for("1", 30.0, cores=16) == 1
    assert parse_threads(" AUTO ") == "auto"


@pytest.mark.parametrize("given", ["0", -1, "two", 1.5e9, "", "1e3"])
def test_anything_else_is_bad_input_naming_the_fix(given):
    with pytest.raises(BadInput) as refused:
        parse_threads(given)
    assert "threads must be" in str(refused.value) and "--threads" in refused.value.fix


@pytest.fixture(scope="module")
def mlp_tiny_library():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import build_library
    from foundation.models.loading import load_model

    loaded = load_model("mlp-tiny", 2)
    library = build_library(loaded, tvm.target.Target({"kind": "llvm", "num-cores": 2}), None)
    return loaded, library


def test_each_library_runs_on_its_own_count_in_one_process(mlp_tiny_library, monkeypatch):
    import tvm

    from foundation.runtime.library_runner import LoadedLibrary

    monkeypatch.setenv("TVM_NUM_THREADS", "2")  # the pool's ceiling, as pin_tvm_threads sets it on 2 cores
    loaded, library = mlp_tiny_library
    inputs, weights = loaded.make_inputs(0), loaded.make_weights(0)
    serial = LoadedLibrary(library, "llvm", threads="auto", stored_latency_ms=0.004)
    wide = LoadedLibrary(library, "llvm", threads=2)
    for model in (serial, wide):
        model.set_weights(weights)
    pool_size = tvm.get_global_func("runtime.NumThreads")

    first = serial(inputs)
    assert serial.threads == 1 and pool_size() == 1
    second = wide(inputs)
    assert wide.threads == 2 and pool_size() == 2
    serial.time(inputs, runs=2, warmup=0)
    assert pool_size() == 1
    np.testing.assert_array_equal(first[0], second[0])  # same kernels, same sums per element


def test_auto_on_every_core_steps_back_to_one_thread_after_a_slow_call(mlp_tiny_library, monkeypatch):
    import tvm

    from foundation.runtime.library_runner import LoadedLibrary

    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    monkeypatch.setattr("foundation.hardware.fingerprint.available_cores", lambda: 2)
    loaded, library = mlp_tiny_library
    inputs, weights = loaded.make_inputs(0), loaded.make_weights(0)
    # Stored on every core at a latency no call can meet: every call after the first reads as a
    # box whose cores are taken.
    auto = LoadedLibrary(library, "llvm", threads="auto", stored_threads=2, stored_latency_ms=1e-9)
    asked = LoadedLibrary(library, "llvm", threads=2, stored_latency_ms=1e-9)
    for model in (auto, asked):
        model.set_weights(weights)
    assert auto.threads == 2 and auto.busy_backoff is not None and asked.busy_backoff is None
    first = auto(inputs)  # the first call is not judged
    for _ in range(SLOW_IN_A_ROW):
        assert auto.threads == 2
        auto(inputs)
    again = auto(inputs)
    assert auto.threads == 1 and tvm.get_global_func("runtime.NumThreads")() == 1
    asked(inputs)
    asked(inputs)
    assert asked.threads == 2 and tvm.get_global_func("runtime.NumThreads")() == 2
    np.testing.assert_array_equal(first[0], again[0])
