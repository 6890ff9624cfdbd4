"""CPU candidates timed in the cache state their kernel meets inside the model (the rule:
foundation.domain.timing_context): the setting, each task's weight buffers, and the evaluator the
runner's workers time a candidate with.

A task's weights are the buffers its PrimFunc marks `layout_free_buffers` (every prepacked form,
the CPU default: relax.transform.AttachAttrLayoutFreeBuffers marks the parameters that are the
model's weights); a plain task has no such mark, and every input but the first is taken for a
weight, the guess TVM's own flush makes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from foundation.config import TIMING_CONTEXT_ENV, cpu_cache_flush
from foundation.domain.timing_context import (
    DEFAULT_TIMING_CONTEXT,
    BufferRoles,
    TaskTiming,
    TimingContext,
    parse_timing_context,
    task_timing,
)
from foundation.hardware import cache_state

if TYPE_CHECKING:  # pragma: no cover
    import tvm

# Repeats of one candidate's timing when each call follows a flush (a call a repeat).
FLUSHED_REPEATS = 10


def timing_context_setting() -> TimingContext | None:
    """TIMING_CONTEXT_ENV, else `flushed` where FARM_CPU_CACHE_FLUSH=1 (its older spelling); None where
    neither is set (the hardware's own: ``hardware_timing_context``). A bad value is BadInput."""
    raw = os.environ.get(TIMING_CONTEXT_ENV, "").strip()
    if raw:
        return parse_timing_context(raw, TIMING_CONTEXT_ENV)
    return TimingContext.FLUSHED if cpu_cache_flush() else None


@dataclass(frozen=True)
class ChosenContext:
    """The context a tuning run times its CPU candidates in when none was asked for, and why."""

    context: TimingContext
    why: str


def timing_context_here(fingerprint_id: str | None = None) -> ChosenContext:
    """The context a CPU tuning run started now times its candidates in: the environment's, else the
    hardware's (``hardware_timing_context``)."""
    asked = timing_context_setting()
    if asked is None:
        return hardware_timing_context(fingerprint_id)
    source = TIMING_CONTEXT_ENV if os.environ.get(TIMING_CONTEXT_ENV, "").strip() else "FARM_CPU_CACHE_FLUSH=1"
    return ChosenContext(asked, f"asked for ({source})")


def hardware_timing_context(fingerprint_id: str | None = None) -> ChosenContext:
    """The context the shipped pack of ``fingerprint_id`` (None: this box's) chose by its A/B, else the
    default."""
    from foundation.registry.shipped_packs import shipped_hardware_timing

    if fingerprint_id is None:
        from foundation.hardware.fingerprint import local_fingerprint

        fingerprint_id = local_fingerprint("llvm").id
    chosen = shipped_hardware_timing(fingerprint_id)
    if chosen is None:
        return ChosenContext(DEFAULT_TIMING_CONTEXT, f"the default (no pack of {fingerprint_id} chose one)")
    return ChosenContext(chosen.context, f"the pack of {fingerprint_id} chose {chosen.describe()}")


def buffer_roles(mod: "tvm.IRModule") -> BufferRoles:
    """The weights, other inputs and outputs among the parameters of ``mod['main']``. The output is
    the last parameter, as Relax's call_tir puts it (a task of several outputs has the others
    taken for inputs)."""
    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    func = mod["main"]
    infos = [info.as_json() for info in ms.arg_info.ArgInfo.from_prim_func(func)]
    sizes = tuple(int(np.prod([int(d) for d in shape], dtype=np.int64)) * np.dtype(dtype).itemsize
                  for _, dtype, shape in infos)
    outputs = (len(infos) - 1,) if infos else ()
    inputs = [i for i in range(len(infos)) if i not in outputs]
    marked = func.attrs.get("layout_free_buffers") if func.attrs is not None else None
    if marked is not None:
        weights = tuple(int(i) for i in marked if int(i) in inputs)
    else:
        weights = tuple(inputs[1:])
    return BufferRoles(weights, tuple(i for i in inputs if i not in weights), outputs, sizes)


def l2_kib_here() -> int | None:
    """This box's L2 per core in KiB, from its fingerprint's device features; None if unknown."""
    from foundation.hardware.fingerprint import local_fingerprint

    return l2_kib_of(local_fingerprint("llvm").details)


def l2_kib_of(details: Mapping[str, Any]) -> int | None:
    """The L2 per core in KiB that a fingerprint's ``details`` measured; None if unknown."""
    from foundation.hardware.device_features import DEVICE_KEY

    value = (details.get(DEVICE_KEY) or {}).get("l2_kib")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def task_timings(mods: Sequence["tvm.IRModule"], requested: TimingContext, l2_kib: int | None) -> list[TaskTiming]:
    """Each task's context (``mods``: their workloads) for ``requested``."""
    return [task_timing(requested, buffer_roles(mod), l2_kib) for mod in mods]


@dataclass(frozen=True)
class ContextEvaluator:
    """MetaSchedule's `f_run_evaluator` for the ``weights``, ``producer`` and ``l2-evicted`` contexts,
    local or RPC.

    Pickled with every candidate into the runner's worker, which imports this module: the preprocs
    are registered there (an RPC server registers its own). Each repeat is one call after the
    preproc. A stock TVM RPC server has no such preproc: there the candidate is timed after TVM's
    own flush of every argument but the first (``flushed``), the nearest context it has."""

    context: TimingContext
    weights: tuple[int, ...]
    activations: tuple[int, ...]
    repeats: int = FLUSHED_REPEATS
    eviction_bytes: int = 0  # l2-evicted's buffer

    def __call__(self, *call_args) -> list[float]:
        # LocalRunner calls (rt_mod, device, config, args); RPCRunner (session, rt_mod, device, config, args).
        session = call_args[0] if len(call_args) == 5 else None
        rt_mod, device, _config, repeated_args = call_args[-4:]
        evaluator = rt_mod.time_evaluator(func_name=rt_mod.entry_name, dev=device, number=1, repeat=self.repeats,
                                          min_repeat_ms=0, f_preproc=self._preproc(session))
        costs: list[float] = []
        for args in repeated_args:
            device.sync()
            costs.extend(float(c) for c in evaluator(*args).results)
        return costs

    def _preproc(self, session) -> str:
        """The preproc's name where the kernel runs, its roles set there."""
        positions = (*self.weights, cache_state.SEPARATOR, *self.activations)
        evicts = self.context is TimingContext.L2_EVICTED
        if session is None:
            cache_state.register_preprocs()
            cache_state.set_roles(*positions)
            if evicts:
                cache_state.set_eviction(self.eviction_bytes)
        else:
            try:
                session.get_function(cache_state.SET_ROLES)(*positions)
                if evicts:
                    session.get_function(cache_state.SET_EVICTION)(self.eviction_bytes)
            except Exception:  # a server without the farm's preprocs (TVM's own, or an older farm's)
                return cache_state.TVM_FLUSH
        return {TimingContext.WEIGHTS: cache_state.FLUSH_WEIGHTS, TimingContext.PRODUCER: cache_state.PRODUCER,
                TimingContext.L2_EVICTED: cache_state.L2_EVICTED}[self.context]


def evaluator_for(timing: TaskTiming | None) -> ContextEvaluator | None:
    """The evaluator a task's candidates need, None where TVM's own does (warm, flushed)."""
    if timing is None or timing.context in (TimingContext.WARM, TimingContext.FLUSHED):
        return None
    return ContextEvaluator(timing.context, timing.roles.weights, timing.roles.activations,
                            eviction_bytes=timing.eviction_bytes)

