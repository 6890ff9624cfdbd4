"""A real TuningRecord's JSON whose trace belongs to no task of the zoo's small models: what a
hostile agent reported for every task of a model, and what the registry may hold from before
reports were checked (issue 58, bug 1)."""

from __future__ import annotations

import json

from foundation.registry import RegistryStore
from foundation.registry.reported_records import new_record_from


def convolution_record(target_json: str, run_secs: float) -> list:
    """A convolution's record ([trace, run_secs, target, args_info]), timed at ``run_secs``."""
    import tvm
    from tvm import te, topi
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from foundation.hardware.targets import to_tvm_target

    data = te.placeholder((1, 3, 8, 8), name="data")
    weight = te.placeholder((4, 3, 3, 3), name="weight")
    mod = tvm.IRModule({"main": te.create_prim_func([data, weight, topi.nn.conv2d_nchw(data, weight, 1, 1, 1)])})
    schedule = tvm.s_tir.Schedule(mod)
    convolution = schedule.get_child_blocks(schedule.get_sblock("root"))[-1]
    schedule.split(schedule.get_loops(convolution)[2], [None, 2])
    record = TuningRecord(schedule.trace, Workload(mod), [run_secs], to_tvm_target(json.loads(target_json)),
                          ArgInfo.from_prim_func(mod["main"]))
    return record.as_json()


def file_foreign_records(url: str, run_secs: float = 1e-9) -> list[int]:
    """Beside every scope's records in the registry at ``url`` (workload, fingerprint, target, TVM),
    a convolution's record timed at ``run_secs``, written straight into the registry; their ids."""
    store = RegistryStore(url)
    try:
        before = {r.id for r in store.records.all_records()}
        scopes = {(r.workload_id, r.fingerprint_id, r.target, r.tvm_version) for r in store.records.all_records()}
        for workload_id, fingerprint_id, target, version in sorted(scopes):
            store.records.add_tuning_records([new_record_from(
                convolution_record(target, run_secs), workload_id=workload_id, fingerprint_id=fingerprint_id,
                target_json=target, tvm_version=version)])
        return sorted({r.id for r in store.records.all_records()} - before)
    finally:
        store.dispose()
