"""Each function a Relax VM calls, timed per inference, and each kernel's speed as a share of the box's peak.

TVM 0.27's VirtualMachine has no profiler; its instrument hook (`VirtualMachine.set_instrument`)
runs before and after every call the VM makes, kernels and its own builtins alike, and each call
is timed here with perf_counter around it (a few microseconds of hook per call, which the
profiled sum shows against the unprofiled whole). A kernel's FLOPs are TVM's estimate of the
PrimFunc the library calls by that name; its share of the peak is its GFLOP/s in the model over
the box's peak: the fingerprint's `details["device"]["peak_gflops"]` (foundation/hardware/device_features.py:
numpy's float32 matmul on every core, measured when the box was fingerprinted), or the fastest rate a
kernel reached on the box where that is higher (`reached_peak`: the sgemm reads low on some CPUs).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping, Sequence

# A prepacked library's kernel is the tuned task's PrimFunc with its weights' packing split out
# (relax.transform.SplitLayoutRewritePreproc), renamed so.
PREPACKED_SUFFIX = "_prepacked"
# The VM's own calls (allocation, shape checks, tuples, views), not kernels.
VM_BUILTIN_PREFIXES = ("vm.", "relax.")


def is_vm_builtin(name: str) -> bool:
    return name.startswith(VM_BUILTIN_PREFIXES)


class CallTimes:
    """Seconds and calls per called function's name, summed over ``runs`` inferences."""

    def __init__(self, runs: int):
        self.runs = runs
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1

    def ms(self, name: str) -> float:
        """Per inference."""
        return self.seconds[name] / self.runs * 1e3

    def calls_per_inference(self, name: str) -> float:
        return self.calls[name] / self.runs

    def total_ms(self) -> float:
        return sum(self.seconds.values()) / self.runs * 1e3

    def names(self) -> list[str]:
        """Heaviest first."""
        return sorted(self.seconds, key=lambda n: -self.seconds[n])


def time_calls(library, inputs: Sequence, runs: int) -> CallTimes:
    """Every call of ``library``'s VM (a foundation.runtime LoadedLibrary, weights set) over ``runs``
    inferences; one untimed inference first allocates the VM's pools. The hook stays on the VM (TVM
    has no call that takes it off): time the library unprofiled before this, not after."""
    import tvm_ffi

    times, started = CallTimes(runs), []

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started.append(time.perf_counter())
        else:
            times.add(str(symbol), time.perf_counter() - started.pop())
        return 0  # relax.VMInstrumentReturnKind.NO_OP: run the call as usual

    library(inputs)
    library.vm.set_instrument(tvm_ffi.convert(instrument))
    for _ in range(runs):
        library(inputs)
    return times


def function_flops(mod) -> dict[str, float]:
    """TVM's FLOP estimate of every PrimFunc of ``mod`` by name (0 where it cannot estimate one)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    flops = {}
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            try:
                flops[gv.name_hint] = float(estimate_tir_flops(tvm.IRModule({"main": func})))
            except Exception:  # a function the estimator does not follow (an extern call) counts nothing
                flops[gv.name_hint] = 0.0
    return flops


def flops_of(name: str, flops: Mapping[str, float]) -> float | None:
    """The FLOPs of the function a library calls ``name``: its own, or its tuned task's when the
    name is the task's prepacked form; None for a VM builtin or an unknown name."""
    if name in flops:
        return flops[name]
    if name.endswith(PREPACKED_SUFFIX):
        return flops.get(name[: -len(PREPACKED_SUFFIX)])
    return None


def kernel_rows(times: CallTimes, flops: Mapping[str, float]) -> list[dict]:
    """One row per function the VM called (builtins left out), heaviest first: its time per
    inference, calls, GFLOP per call and GFLOP/s in the model; its share of the box's peak is
    `with_shares_of`'s, once the peak is known (`reached_peak`)."""
    rows = []
    total = times.total_ms()
    for name in times.names():
        if is_vm_builtin(name):
            continue
        ms, calls = times.ms(name), times.calls_per_inference(name)
        flop = flops_of(name, flops)
        gflops = (flop * calls / (ms / 1e3) / 1e9) if flop and ms > 0 else None
        rows.append({
            "kernel": name, "ms": ms, "calls": calls, "share_of_model": ms / total if total else 0.0,
            "gflop_per_call": flop / 1e9 if flop is not None else None, "gflops": gflops, "share_of_peak": None,
        })
    return rows


def reached_peak(probe_gflops: float | None, rates: Mapping[str, float]) -> dict:
    """The box's peak for shares of it: the probe's ``probe_gflops``, or the fastest of ``rates`` (GFLOP/s
    by what reached it) where that is higher: NumPy's sgemm read 224-251 GFLOP/s on an Ice Lake Xeon whose
    tuned convolutions reached 319, and a share of a probe a kernel beats says nothing."""
    fastest = max(rates, key=rates.get, default=None)
    if fastest is not None and rates[fastest] > (probe_gflops or 0.0):
        return {"peak_gflops": rates[fastest], "probe_gflops": probe_gflops,
                "peak_from": f"{fastest}, faster than the probe ({probe_gflops or 0:.0f} GFLOP/s)"}
    return {"peak_gflops": probe_gflops, "probe_gflops": probe_gflops, "peak_from": "the probe"}


def with_shares_of(rows: list[dict], peak_gflops: float | None) -> list[dict]:
    """``rows`` (`kernel_rows`) with each kernel's share of ``peak_gflops``."""
    for row in rows:
        row["share_of_peak"] = row["gflops"] / peak_gflops if row["gflops"] is not None and peak_gflops else None
    return rows


def peak_gflops_of(fingerprint) -> float | None:
    """The fingerprint's measured peak (GFLOP/s), or None where it has none (a box fingerprinted before
    device features were measured)."""
    device = (fingerprint.details or {}).get("device") or {}
    value = device.get("peak_gflops")
    return float(value) if value else None


def model_function_flops(model, target, form) -> dict[str, float]:
    """`function_flops` of ``model`` lowered as the farm lowers it in ``form`` (a WeightsLayout) for
    ``target``: the names are those of the tasks, which the library's functions carry (a prepacked
    one with PREPACKED_SUFFIX)."""
    from foundation.compile import lower_for_tuning

    mod = model.mod
    if form.prepacks:  # which of main's parameters are weights, as the farm's build marks them
        mod = mod.clone()
        mod["main"] = mod["main"].with_attr("num_input", len(model.inputs))
    return function_flops(lower_for_tuning(mod, target, prepack=form.prepacks,
                                           block_activations=form.blocks_activations))
