"""Load a compiled model library (no compiler involved) and run or time it on this device."""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from foundation.domain.weights_layout import TRANSFORM_PARAMS_FUNCTION
from foundation.runtime.busy_backoff import BusyBackoff
from foundation.runtime.resident_inputs import ResidentInputs, host_arrays
from foundation.runtime.threads import AUTO, parse_threads, threads_for, use_threads

if TYPE_CHECKING:  # pragma: no cover
    import tvm


@dataclass(frozen=True)
class Latency:
    """End-to-end latency of one inference call, over repeated runs after warm-up."""

    mean_ms: float
    median_ms: float
    std_ms: float
    runs: int
    warmup: int

    def to_json(self) -> dict:
        return {
            "mean": self.mean_ms,
            "median": self.median_ms,
            "std": self.std_ms,
            "runs": self.runs,
            "warmup": self.warmup,
        }


def latency_of(blocks: Sequence[Sequence[float]], warmup: int) -> Latency:
    """The latency of runs timed in blocks (foundation.runtime.interleaved_timing), in ms."""
    samples = [x for block in blocks for x in block]
    return Latency(mean_ms=statistics.fmean(samples), median_ms=statistics.median(samples),
                   std_ms=statistics.pstdev(samples), runs=len(samples), warmup=warmup)


def device_for(target_kind: str, index: int = 0) -> "tvm.runtime.Device":
    import tvm

    return tvm.cuda(index) if target_kind == "cuda" else tvm.cpu(index)


class LoadedLibrary:
    """A model library loaded into a Relax VM; call it with numpy inputs and weights.

    Weights are always given plain, in the model's order: a prepacked library
    (foundation.domain.weights_layout) rearranges them once, in `set_weights`.
    """

    def __init__(self, library: bytes, target_kind: str, device_index: int = 0, *,
                 threads: int | str | None = None, stored_latency_ms: float | None = None,
                 stored_threads: int | None = None):
        """``threads``: the CPU threads its kernels run on, "auto" (foundation.runtime.threads,
        from ``stored_threads``, validation's choice, else ``stored_latency_ms``), or None to leave
        this process's pool as it is (validation and tuning time libraries on every core, as they
        were tuned)."""
        from foundation.hardware.tvm_startup import pin_tvm_threads

        pin_tvm_threads()
        import tvm
        from tvm import relax

        self.device = device_for(target_kind, device_index)
        # load_module needs a file; the bytes are what the registry stored and verified.
        with tempfile.TemporaryDirectory(prefix="farm-lib-") as tmp:
            path = os.path.join(tmp, "model.so")
            with open(path, "wb") as f:
                f.write(library)
            module = tvm.runtime.load_module(path)
        self.module = module  # for a second VM over the same code (bench/prepack.py times kernels on one)
        self.vm = relax.VirtualMachine(module, self.device)
        self._main = self.vm["main"]  # looked up once: a lookup a call is another microsecond
        # A call's inputs are copied into tensors kept on the device (foundation.runtime.resident_inputs).
        # They and the VM serve one caller at a time: every run of the VM (a call, timing, the weights'
        # prepacking) holds this lock. Two threads in one VM at once crash the process (SIGSEGV, or
        # "Check failed: reg < frame->register_file.size()").
        self._inputs = ResidentInputs(self.device)
        self._vm_lock = threading.Lock()
        self.threads: int | None = None
        # auto on every core: one thread while calls say other work holds the cores.
        self.busy_backoff: BusyBackoff | None = None
        if threads is not None and target_kind != "cuda":
            from foundation.hardware.fingerprint import available_cores

            choice = parse_threads(threads)
            self.threads = threads_for(choice, stored_latency_ms, available_cores(), stored_threads)
            if choice == AUTO and self.threads > 1 and stored_latency_ms:
                self.busy_backoff = BusyBackoff(self.threads, stored_latency_ms)
        self.prepacked = bool(self.vm.module.implements_function(TRANSFORM_PARAMS_FUNCTION))
        self._weights: list | None = None

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        """Upload the weights once (prepacking them, if the library wants them so); later
        calls pass only the inputs."""
        import tvm

        tensors = [tvm.runtime.tensor(w, self.device) for w in weights]
        with self._vm_lock:
            if self.prepacked:
                self._use_threads()
                tensors = list(self.vm[TRANSFORM_PARAMS_FUNCTION](tensors))
            self._weights = tensors

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with self._vm_lock:
            if self.busy_backoff is None:
                return host_arrays(self._main(*self._call_arguments(inputs)), self._inputs.on_cpu)
            self.threads = self.busy_backoff.threads()
            args = self._call_arguments(inputs)  # resizes the pool if the count changed: not timed
            begin = time.perf_counter()
            result = self._main(*args)
            self.busy_backoff.ran(self.threads, (time.perf_counter() - begin) * 1e3)
            return host_arrays(result, self._inputs.on_cpu)

    def time(self, inputs: Sequence[np.ndarray], runs: int = 20, warmup: int = 3) -> Latency:
        """Wall-clock latency of ``main`` on device-resident arguments, synchronised; the runs
        one after another, no other call of this library between them."""
        args = self.device_arguments(inputs)
        main = self._main
        with self._vm_lock:
            self._use_threads()
            for _ in range(warmup):
                main(*args)
            self.device.sync()
            samples = []
            for _ in range(runs):
                begin = time.perf_counter()
                main(*args)
                self.device.sync()
                samples.append((time.perf_counter() - begin) * 1e3)
        return Latency(
            mean_ms=statistics.fmean(samples),
            median_ms=statistics.median(samples),
            std_ms=statistics.pstdev(samples),
            runs=runs,
            warmup=warmup,
        )

    def timer(self, inputs: Sequence[np.ndarray]):
        """One synchronised call of ``main`` on device-resident arguments, returning its wall time in ms
        (foundation.runtime.interleaved_timing)."""
        args = self.device_arguments(inputs)
        main = self._main

        def one() -> float:
            with self._vm_lock:
                self._use_threads()  # the thread timing may not be the one that made the timer
                begin = time.perf_counter()
                main(*args)
                self.device.sync()
                return (time.perf_counter() - begin) * 1e3

        return one

    def device_arguments(self, inputs: Sequence[np.ndarray]) -> list:
        """`main`'s arguments on the device, tensors of their own: the inputs, then the weights in
        the form `main` takes."""
        import tvm

        self._ready()
        return [tvm.runtime.tensor(np.ascontiguousarray(x), self.device) for x in inputs] + self._weights

    def weight_arguments(self) -> list:
        """The weights as `main` takes them (a prepacked library's rearranged), on the device."""
        self._ready()
        return list(self._weights)

    def _call_arguments(self, inputs: Sequence[np.ndarray]) -> list:
        """`main`'s arguments for one call: the inputs copied into the kept tensors, then the weights."""
        self._ready()
        return self._inputs.fill(inputs) + self._weights

    def _ready(self) -> None:
        if self._weights is None:
            raise RuntimeError("set_weights() must be called before running the model")
        self._use_threads()

    def _use_threads(self) -> None:
        """This library's thread count on the calling thread's pool: TVM keeps a pool per thread
        that runs a library, so a count set on the thread that loaded it holds on no other."""
        if self.threads is not None:
            use_threads(self.threads)
