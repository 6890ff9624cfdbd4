"""Measure schedules of one task outside MetaSchedule's search, as it would: build them with the
tuning's builder, run what built with its runner, commit every result (failures too: history is
training data) and remove the build directories. The warm start's seeds and each task's untuned
form are measured this way, before the search."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import tvm

# MetaSchedule's stand-in for "no time measured" (what its AddToDatabase stores for a failure).
FAILED_SEC = 1e10


def measure_and_commit(schedules: Sequence[Any], mod: "tvm.IRModule", target: "tvm.target.Target",
                       builder, runner, database) -> tuple[list, list, list[list[float]]]:
    """Build and run ``schedules`` of ``mod``, commit each as a record, end the database's batch;
    returns the candidates, the runner results and the run seconds committed ([FAILED_SEC] for a failure)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerInput, RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    candidates = [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules]
    built = builder.build([BuilderInput(c.sch.mod, target) for c in candidates])
    ran = [i for i, b in enumerate(built) if b.error_msg is None]
    device = device_type(target)
    futures = runner.run([RunnerInput(built[i].artifact_path, device, candidates[i].args_info) for i in ran])
    results = [RunnerResult(run_secs=None, error_msg=b.error_msg) for b in built]
    for i, future in zip(ran, futures):
        results[i] = future.result()
    workload = database.commit_workload(mod)
    committed = []
    for candidate, result in zip(candidates, results):
        failed = result.error_msg is not None or not result.run_secs
        run_secs = [FAILED_SEC] if failed else [float(s) for s in result.run_secs]
        database.commit_tuning_record(TuningRecord(candidate.sch.trace, workload, run_secs, target,
                                                   candidate.args_info))
        committed.append(run_secs)
    if hasattr(database, "end_of_batch"):
        database.end_of_batch()
    for b in built:
        if b.artifact_path:
            shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
    return candidates, results, committed


def device_type(target: "tvm.target.Target") -> str:
    """The runner's name for the target's device ("cpu" for llvm, "cuda")."""
    import tvm

    return str(tvm.runtime.Device(target.get_target_device_type(), 0)).split(":")[0]
