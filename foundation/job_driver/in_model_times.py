"""Each tuning task's time inside the model, and how far that is above its ceiling: what the next
round of a job tuned in rounds divides its trials by (foundation.domain.trial_plan).

A kernel timed alone is not the kernel the model runs: there its weights come from L3 or memory,
its activations from the kernel before it. After a round the job's model is built anyway (to judge
it); here that build runs ``IN_MODEL_RUNS`` more times with the Relax VM's instrument timing every
call it makes (TVM 0.27's VM has no profiler; bench/profile.py does the same), each kernel's median
over the runs taken, and the kernels that are one task (structurally equal TIR) summed. The
instrument costs a microsecond or two a call, a few percent of a small kernel.

A task's ceiling is the least time its work can take on this box: its FLOPs at the box's measured
peak (the fingerprint's device features, foundation.hardware.device_features). Not its bytes at the
copy bandwidth: inside a small model every buffer is cached, and a memory roofline put every
kernel's ceiling above its time. What a task loses in the model is its time there less that ceiling.
CPU targets only: a GPU's calls return before its kernels end.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.domain.weights_layout import WeightsLayout
    from foundation.models.loaded import LoadedModel

IN_MODEL_RUNS = 10
# What TVM's SplitLayoutRewritePreproc appends to a kernel whose weights a prepacked library rearranges
# at load: the kernel is the task's all the same.
PREPACKED_SUFFIX = "_prepacked"
# The VM's own calls (allocation, shape checks, tuples): not kernels.
_BUILTIN_PREFIXES = ("vm.builtin.", "vm.", "relax.")


@dataclass(frozen=True)
class InModelTimes:
    """Each task's time in one inference of the model (all its calls), its ceiling, in ms."""

    task_ms: tuple[float | None, ...]  # None: none of its kernels ran (or none was recognised)
    ceiling_ms: tuple[float, ...]
    runs: int

    def to_json(self) -> dict[str, Any]:
        return {"task_ms": list(self.task_ms), "ceiling_ms": list(self.ceiling_ms), "runs": self.runs}


def kernel_names(loaded: "LoadedModel", target: "tvm.target.Target", form: "WeightsLayout",
                 tasks: Sequence["TuningTask"]) -> dict[str, int]:
    """The index in ``tasks`` of every kernel of the model's library that is one of them, by the
    kernel's name (a task stands for every structurally equal TIR function of the model)."""
    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from foundation.compile import lowered_for_tasks

    lowered = lowered_for_tasks(loaded, target, prepack=form.prepacks, block_activations=form.blocks_activations)
    by_hash: dict[int, list[int]] = defaultdict(list)
    for index, task in enumerate(tasks):
        by_hash[tvm_ffi.structural_hash(task.mod)].append(index)
    names = {}
    for gv, func in lowered.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        mod = _normalize_mod(func)
        for index in by_hash.get(tvm_ffi.structural_hash(mod), []):
            if tvm_ffi.structural_equal(mod, tasks[index].mod):
                names[gv.name_hint] = index
                break
    return names


def task_of(kernel: str, names: Mapping[str, int]) -> int | None:
    """The task index of the library's kernel named ``kernel`` (``names``: kernel_names'), if any."""
    if kernel in names:
        return names[kernel]
    return names.get(kernel.removesuffix(PREPACKED_SUFFIX)) if kernel.endswith(PREPACKED_SUFFIX) else None


def kernel_times_ms(library: bytes, target_kind: str, inputs: Sequence, weights: Sequence,
                    runs: int = IN_MODEL_RUNS) -> dict[str, float]:
    """Each kernel's time in one inference of ``library`` (every call of it summed), the median of
    ``runs`` instrumented inferences, in ms; the VM's builtins left out."""
    import tvm_ffi

    from foundation.runtime.library_runner import LoadedLibrary

    model = LoadedLibrary(library, target_kind)
    model.set_weights(weights)
    model(inputs)  # the first call allocates the VM's pools: not timed
    per_run: list[dict[str, float]] = []
    started: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started.append(time.perf_counter())
        else:
            name = str(symbol)
            per_run[-1][name] = per_run[-1].get(name, 0.0) + time.perf_counter() - started.pop()
        return 0  # relax.VMInstrumentReturnKind.NO_OP: the call runs as usual

    model.vm.set_instrument(tvm_ffi.convert(instrument))
    for _ in range(runs):
        per_run.append({})
        model(inputs)
    names = {name for run in per_run for name in run if not name.startswith(_BUILTIN_PREFIXES)}
    return {name: statistics.median(run.get(name, 0.0) for run in per_run) * 1e3 for name in names}


def task_ceiling_ms(task: "TuningTask", device: Mapping[str, Any]) -> float:
    """The least time ``task``'s calls in one inference can take on a box with ``device``'s features:
    its FLOPs at the peak; 0 where the peak is unknown."""
    peak = float(device.get("peak_gflops") or 0.0)  # GFLOP/s = 1e6 FLOP per ms
    return task.flop / (peak * 1e6) * task.weight if peak > 0 else 0.0


def in_model_times(library: bytes, loaded: "LoadedModel", target: "tvm.target.Target", form: "WeightsLayout",
                   tasks: Sequence["TuningTask"], seed: int, device: Mapping[str, Any],
                   runs: int = IN_MODEL_RUNS) -> InModelTimes:
    """Each task's time inside the model built as ``library`` (on the job's inputs and weights of
    ``seed``), and its ceiling on a box with ``device``'s features."""
    names = kernel_names(loaded, target, form, tasks)
    kernels = kernel_times_ms(library, target.kind.name, loaded.make_inputs(seed), loaded.make_weights(seed), runs)
    task_ms: list[float | None] = [None] * len(tasks)
    for name, ms in kernels.items():
        index = task_of(name, names)
        if index is not None:
            task_ms[index] = (task_ms[index] or 0.0) + ms
    return InModelTimes(tuple(task_ms), tuple(task_ceiling_ms(t, device) for t in tasks), runs)
