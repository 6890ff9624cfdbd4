"""A task's untuned form as a record: valid to MetaSchedule and the registry, built as TVM's untuned build."""

from __future__ import annotations

import json

import pytest

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics


@pytest.fixture(scope="module")
def mlp():
    """mlp-tiny at batch 1, its plain tasks for llvm, and the target."""
    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import extract_tuning_tasks
    from foundation.models.loading import load_model

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    loaded = load_model("mlp-tiny", 1)
    return loaded, extract_tuning_tasks(loaded, target), target


def _untuned_records(tasks, target):
    """A MetaSchedule database holding each task's untuned form, and one other schedule of the
    first task timed slower."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import MemoryDatabase, TuningRecord

    from foundation.meta_schedule.untuned_form import untuned_schedule

    database = MemoryDatabase()
    for task in tasks:
        schedule = untuned_schedule(task.mod)
        database.commit_tuning_record(TuningRecord(schedule.trace, database.commit_workload(task.mod), [1e-5],
                                                   target, ArgInfo.from_entry_func(schedule.mod)))
    return database


def test_the_untuned_form_is_a_valid_record_the_registry_and_metaschedule_keep(mlp):
    from foundation.meta_schedule.database.record_to_json import tuning_record_json
    from foundation.meta_schedule.untuned_form import is_untuned_trace, is_untuned_trace_json
    from foundation.registry.reported_records import trace_json_is_valid

    _, tasks, target = mlp
    database = _untuned_records(tasks, target)
    for task in tasks:
        (best,) = database.get_top_k(database.commit_workload(task.mod), 1)  # an empty trace would be dropped
        assert is_untuned_trace(best.trace)
        trace_json = tuning_record_json(best)[0]
        assert trace_json_is_valid(trace_json) and is_untuned_trace_json(trace_json)
        assert is_untuned_trace_json(json.dumps(trace_json))


def test_a_tuned_schedule_is_not_taken_for_the_untuned_form(mlp):
    import tvm

    from foundation.meta_schedule.untuned_form import is_untuned_trace, is_untuned_trace_json

    _, tasks, _ = mlp
    schedule = tvm.s_tir.Schedule(tasks[0].mod)
    block = schedule.get_sblock("root", func_name="main")
    (loop, *_) = schedule.get_loops(schedule.get_child_blocks(block)[0])
    schedule.parallel(loop)
    assert not is_untuned_trace(schedule.trace)
    assert not is_untuned_trace_json(schedule.trace.as_json())
    assert not is_untuned_trace_json([[], []])


def test_a_build_from_untuned_form_records_is_the_untuned_build(mlp):
    """The identity trace is the untuned function: the same lowered functions (but for the mark
    MetaSchedule sets on what it applied), the same library and the same outputs."""
    import tvm
    import tvm_ffi
    from tvm import relax

    from foundation.compile import build_library, lower_for_tuning
    from foundation.meta_schedule.untuned_form import tasks_built_untuned
    from foundation.runtime.validation import check_library

    loaded, tasks, target = mlp
    database = _untuned_records(tasks, target)
    assert tasks_built_untuned(tasks, database) == [t.name for t in tasks]

    lowered = lower_for_tuning(loaded.mod, target)
    with target, database:
        applied = relax.transform.MetaScheduleApplyDatabase()(lowered)
    functions = [gv for gv, f in lowered.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(functions) == len(tasks)
    for gv in functions:
        assert applied[gv.name_hint].attrs["tirx.is_scheduled"]  # the records were applied ...
        # ... and changed nothing else
        assert tvm_ffi.structural_equal(lowered[gv].with_attr("tirx.is_scheduled", True), applied[gv.name_hint])

    with_records = build_library(loaded, target, database)
    untuned = build_library(loaded, target, None)
    assert with_records == untuned  # the same shared object, byte for byte
    check = check_library(with_records, untuned, "llvm", loaded.make_inputs(0), loaded.make_weights(0), runs=3)
    assert check.validation.passed and check.validation.max_abs_err == 0.0, check.validation


def test_a_task_with_a_faster_tuned_record_is_not_built_untuned(mlp):
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.untuned_form import tasks_built_untuned, untuned_form_known

    _, tasks, target = mlp
    database = _untuned_records(tasks, target)
    import tvm

    schedule = tvm.s_tir.Schedule(tasks[0].mod)
    block = schedule.get_sblock("root", func_name="main")
    (loop, *_) = schedule.get_loops(schedule.get_child_blocks(block)[0])
    schedule.parallel(loop)
    database.commit_tuning_record(TuningRecord(schedule.trace, database.commit_workload(tasks[0].mod), [1e-6],
                                               target, ArgInfo.from_entry_func(schedule.mod)))
    assert tasks_built_untuned(tasks, database) == [t.name for t in tasks[1:]]
    assert all(untuned_form_known(database, t.mod) for t in tasks)  # measured: not measured again
