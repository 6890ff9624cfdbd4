"""Calls of a loaded model: its inputs copied into tensors kept on the device
(foundation.runtime.resident_inputs), its outputs arrays of their own, one call at a time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import farm
from foundation.errors import FarmError
from foundation.hardware.fingerprint import available_cores
from foundation.runtime.resident_inputs import host_arrays

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tuned_mlp_tiny, tmp_path_factory) -> str:
    """A copy of the run's tuned home's registry, where mlp-tiny batch 2 was tuned."""
    home = tuned_mlp_tiny.copy_to(tmp_path_factory.mktemp("load-calls") / "home")
    return f"sqlite:///{home / 'registry.db'}"


@pytest.fixture(scope="module")
def model(registry):
    """mlp-tiny batch 2 as `farm.load` gives it."""
    return farm.load("mlp-tiny", "llvm", 2, registry=registry)


def _inputs(model, seed: int) -> list[np.ndarray]:
    return model.example_inputs(seed)


def _reference(model, inputs) -> list[np.ndarray]:
    """The same call on tensors made for it alone, as every call was made before the kept ones."""
    library = model.library
    return host_arrays(library.vm["main"](*library.device_arguments(inputs)), True)


def test_each_call_answers_its_own_inputs_and_keeps_no_view_of_the_devices_memory(model):
    first_in, second_in = _inputs(model, 1), _inputs(model, 2)
    (first,) = model(first_in)
    kept = first.copy()
    (second,) = model(second_in)
    assert np.array_equal(first, kept), "a later call changed an earlier call's result"
    assert not np.array_equal(first, second)
    assert np.array_equal(first, _reference(model, first_in)[0])
    assert np.array_equal(second, _reference(model, second_in)[0])
    assert first.flags.owndata and second.flags.owndata


def test_a_strided_input_is_copied_in_as_its_values(model):
    (given,) = _inputs(model, 3)
    strided = np.asfortranarray(given) if given.ndim > 1 else given[::-1].copy()[::-1]
    assert not strided.flags.c_contiguous or given.ndim == 1
    assert np.array_equal(model([strided])[0], _reference(model, [given])[0])


def test_a_wrong_input_is_refused_in_one_line_and_the_next_call_still_answers(model):
    (given,) = _inputs(model, 4)
    with pytest.raises(FarmError, match=r"input '.*' must be float32\[.*\], got float64\[.*\]"):
        model([given.astype("float64")])
    with pytest.raises(FarmError, match=r"got a list, not a numpy array"):
        model([given.tolist()])
    with pytest.raises(FarmError, match=r"must be float32\[.*\], got float32\[1, "):
        model([given[:1]])
    # Past the API's check, the library itself: a float64 array makes float64 tensors, which the
    # model refuses as it did when every call made its own; the kept float32 ones come back after.
    with pytest.raises(ValueError, match="expect Tensor with dtype float32 but get float64"):
        model.library([given.astype("float64")])
    assert np.array_equal(model([given])[0], _reference(model, [given])[0])


def test_calls_from_several_threads_each_get_their_own_answer(model):
    inputs = [_inputs(model, seed) for seed in range(4)]
    expected = [_reference(model, x)[0] for x in inputs]
    wrong: list[int] = []

    def calls(index: int) -> None:
        for _ in range(200):
            if not np.array_equal(model(inputs[index])[0], expected[index]):
                wrong.append(index)

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not wrong, f"{len(wrong)} calls answered another thread's inputs"


# Two threads call the model while another times it: two in one VM at once crashed the process
# (SIGSEGV, or "Check failed: reg < frame->register_file.size()"). With a second load, the second
# caller calls that one, which runs beside the first. In a process of its own, so that a crash
# fails this test instead of ending the run; an error in any thread fails it too.
CALL_WHILE_TIMING = textwrap.dedent("""
    import sys, threading
    import farm

    models = [farm.load("mlp-tiny", "llvm", 2, registry=sys.argv[1]) for _ in range(int(sys.argv[2]))]
    model = models[0]
    inputs = model.example_inputs()
    expected = model(inputs)[0]
    calls, wrong, errors, timed = [0, 0], [], [], threading.Event()

    def call(index):
        while not timed.is_set():
            try:
                if not (models[index % len(models)](inputs)[0] == expected).all():
                    wrong.append(index)
            except Exception as err:
                errors.append(f"call: {type(err).__name__}: {err}"[:300])
            calls[index] += 1

    callers = [threading.Thread(target=call, args=(index,)) for index in range(2)]
    for caller in callers:
        caller.start()
    for _ in range(50):
        try:
            model.time(inputs, runs=100, warmup=1)
        except Exception as err:
            errors.append(f"time: {type(err).__name__}: {err}"[:300])
    timed.set()
    for caller in callers:
        caller.join()
    print(f"calls {calls}, wrong answers {len(wrong)}, errors {len(errors)}", *errors[:3], sep="\\n")
    sys.exit(1 if wrong or errors or 0 in calls else 0)
""")


@pytest.mark.parametrize("loads", [1, 2])
def test_calls_while_another_thread_times_the_model_wait_their_turn(registry, loads):
    done = subprocess.run([sys.executable, "-c", CALL_WHILE_TIMING, registry, str(loads)], capture_output=True,
                          text=True, timeout=300)  # the unlocked VM could also hang
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"


def pool_threads() -> int:
    """How many threads the calling thread's TVM pool runs parallel regions on now."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def test_the_thread_count_holds_on_every_thread_that_calls(registry):
    # A count other than a fresh thread's own pool (every core this process may use).
    count = 1 if available_cores() > 1 else 2
    model = farm.load("mlp-tiny", "llvm", 2, registry=registry, threads=count)
    inputs = model.example_inputs()
    model(inputs)  # on this thread first: the count set here holds on no other
    seen: dict[str, int] = {}

    def on_a_worker() -> None:
        model(inputs)
        seen["call"] = pool_threads()

    def timed_on_a_worker() -> None:
        model.time(inputs, runs=2, warmup=0)
        seen["time"] = pool_threads()

    for work in (on_a_worker, timed_on_a_worker):
        worker = threading.Thread(target=work)
        worker.start()
        worker.join(timeout=60)
    assert seen == {"call": count, "time": count}


@pytest.mark.parametrize(("method", "given", "refusal"), [
    ("example_inputs", dict(seed=-1), "seed must be 0 to 4,294,967,295, got -1"),
    ("example_inputs", dict(seed=1.5), "seed must be an integer, got float"),
    ("time", dict(inputs=None), "inputs must be a list of arrays, one per model input, got a NoneType"),
    ("time", dict(inputs={"x": 1}), "inputs must be a list of arrays"),
    ("time", dict(runs=0), "runs must be 1 to 1,000,000, got 0"),
    ("time", dict(runs=True), "runs must be an integer, got bool"),
    ("time", dict(warmup=-1), "warmup must be 0 to 1,000, got -1"),
    ("__call__", dict(inputs=None), "got a NoneType, not a numpy array"),
    ("__call__", dict(inputs="x"), "got a str, not a numpy array"),
])
def test_a_bad_argument_to_a_loaded_models_method_is_refused_in_one_line(model, method, given, refusal):
    if method == "time":
        given = {"inputs": model.example_inputs(), **given}
    with pytest.raises(FarmError) as refused:
        if method == "__call__":
            model(given["inputs"])
        else:
            getattr(model, method)(**given)
    assert refusal in str(refused.value) and refused.value.exit_code == 2


def test_time_takes_one_array_as_a_call_does(model):
    (given,) = _inputs(model, 5)
    assert model.time(given, runs=2, warmup=0).runs == 2
