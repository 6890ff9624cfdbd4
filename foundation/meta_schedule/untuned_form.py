"""Each task's untuned form, measured as a candidate like any other, so the build takes it where it is fastest.

TVM's untuned build compiles a task's PrimFunc as extracted: on CPUs nothing schedules it (the
Relax CPU pipeline has no default schedule). The untuned form as a schedule is that function with
a trace that only looks up its root block: MetaSchedule and the registry count an empty trace as
invalid (`trace_is_valid`), and a lookup changes nothing. The library `MetaScheduleApplyDatabase`
builds with such a record is the untuned build's, LLVM IR for LLVM IR (checked on mlp-tiny plain
and resnet-tiny prepacked; tests/foundation/meta_schedule/test_untuned_form.py checks the
functions).

Measured once per task in a tuning run, before any seed or search candidate, and committed as a
record: the best-record choice at build time then picks the untuned form wherever it timed faster
than every tuned schedule (a microsecond matmul whose parallel regions cost more than they save),
in the embedded mode and on agents alike, and a cold job has a time for every task after its first
round. CPU (llvm) targets only: a GPU's untuned build is DLight's default schedule, not the
function as extracted, which would not even build.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import tvm

_LOG = logging.getLogger(__name__)
_ROOT_BLOCK = "root"
_LOOKUP = "GetSBlock"
# A task whose untuned form is among its best this many records is not measured again; one whose
# untuned form lost to this many schedules is, at most one trial in that many, by a job that tunes it.
LOOKBACK = 64


def measures_untuned_form(target: "tvm.target.Target") -> bool:
    """Whether a task's untuned form on ``target`` is its PrimFunc as extracted (CPUs)."""
    return target.kind.name == "llvm"


def untuned_schedule(mod: "tvm.IRModule"):
    """The task's function unchanged, as a schedule whose trace MetaSchedule counts as valid."""
    from tvm.s_tir import Schedule

    schedule = Schedule(mod)
    schedule.get_sblock(_ROOT_BLOCK, func_name="main")
    return schedule


def is_untuned_trace(trace) -> bool:
    """Whether a record's trace is `untuned_schedule`'s: one root-block lookup, nothing else."""
    insts = list(trace.insts)
    return (len(insts) == 1 and insts[0].kind.name == _LOOKUP
            and str(insts[0].attrs[0]) == _ROOT_BLOCK)


def is_untuned_trace_json(trace_json: Any) -> bool:
    """`is_untuned_trace` read off a trace's JSON ([[inst, ...], decisions], each inst
    [kind name, inputs, attrs, outputs]), for records that arrive as text."""
    if isinstance(trace_json, str):
        trace_json = json.loads(trace_json)
    insts = trace_json[0] if isinstance(trace_json, list) and trace_json else []
    return (len(insts) == 1 and isinstance(insts[0], list) and insts[0][0] == _LOOKUP
            and len(insts[0]) > 2 and list(insts[0][2])[:1] == [_ROOT_BLOCK])


def untuned_form_known(database, mod: "tvm.IRModule") -> bool:
    """Whether ``database`` holds a measured untuned form of ``mod`` among its best LOOKBACK records."""
    if not database.has_workload(mod):
        return False
    return any(is_untuned_trace(r.trace) for r in database.get_top_k(database.commit_workload(mod), LOOKBACK))


def measure_untuned_forms(contexts: Sequence[Any], planned: Sequence[int], target: "tvm.target.Target",
                          builder, runner, database, cancelled: threading.Event | None = None,
                          picked: Callable[[int | None], None] | None = None) -> list[int]:
    """Measure the untuned form of every task planned a trial whose database has none, one task after
    another, with the tuning's builder and runner, and commit each result (failures too); returns the
    trials measured per task (0 or 1), which come out of the tasks' plans. ``picked(i)`` is called
    before task i's is measured, ``picked(None)`` at the end (live progress attributes results by it)."""
    from foundation.meta_schedule.measured_batch import measure_and_commit

    measured = [0] * len(contexts)
    if not measures_untuned_form(target):
        return measured
    for index, context in enumerate(contexts):
        if cancelled is not None and cancelled.is_set():
            break
        if planned[index] <= 0 or untuned_form_known(database, context.mod):
            continue
        if picked is not None:
            picked(index)
        _, [result], _ = measure_and_commit([untuned_schedule(context.mod)], context.mod, target, builder, runner,
                                            database)
        failed = result.error_msg is not None or not result.run_secs
        measured[index] = 1
        if failed:
            _LOG.warning("task %d's untuned form failed to measure: %s", index, result.error_msg)
    if picked is not None:
        picked(None)
    return measured


def tasks_built_untuned(tasks: Sequence[Any], database) -> list[str]:
    """The names of ``tasks`` (anything with ``name`` and ``mod``) that a build applying ``database``
    compiles untuned: their best record is their untuned form, or they have no valid record."""
    names = []
    for task in tasks:
        best = best_record(database, task.mod)
        if best is None or is_untuned_trace(best.trace):
            names.append(task.name)
    return names


def best_record(database, mod: "tvm.IRModule"):  # type: ignore[no-untyped-def]
    """The fastest valid record of ``mod`` in ``database``, or None."""
    if not database.has_workload(mod):
        return None
    best = database.get_top_k(database.commit_workload(mod), 1)
    return best[0] if best else None
