"""TVM objects for database tests: a small matmul workload and records of it (TVM imported lazily)."""

from __future__ import annotations


def matmul_module(n: int = 64):  # type: ignore[no-untyped-def]
    """A one-block TIR matmul, the smallest thing MetaSchedule would tune."""
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def split_trace(mod, factor: int):  # type: ignore[no-untyped-def]
    """A schedule trace that splits the outer loop by ``factor``: distinct per factor."""
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    i, _j, _k = sch.get_loops(sch.get_sblock("matmul"))
    sch.split(i, [None, factor])
    return sch.trace


def tuning_record(workload, factor: int, run_secs, target="llvm"):  # type: ignore[no-untyped-def]
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    return TuningRecord(
        split_trace(workload.mod, factor),
        workload,
        run_secs,
        Target(target),
        ArgInfo.from_prim_func(workload.mod["main"]),
    )


def layout_rewrite_record(workload, block: int, run_secs, target="llvm"):  # type: ignore[no-untyped-def]
    """A record whose trace lays B out in blocks of ``block`` rows (TransformLayout, whose input is an
    IndexMap): what MetaSchedule's RewriteLayout adds to every candidate of a prepacked workload."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    sch = tvm.s_tir.Schedule(workload.mod)
    sch.transform_layout(sch.get_sblock("matmul"), ("read", 1), lambda k, j: (k // block, j, k % block))
    return TuningRecord(sch.trace, workload, run_secs, Target(target), ArgInfo.from_prim_func(workload.mod["main"]))


def build_and_time(builder, runner, mod, target):  # type: ignore[no-untyped-def]
    """``mod`` built and timed once by a MetaSchedule builder and runner, as tuning measures a
    candidate: (its run seconds, its arguments' infos); a build or run error fails the test."""
    from tvm.s_tir import meta_schedule as ms

    (built,) = builder.build([ms.builder.BuilderInput(mod, target)])
    assert built.error_msg is None, built.error_msg
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, "cpu", args)])
    result = future.result()
    assert result.error_msg is None, result.error_msg
    return [float(s) for s in result.run_secs], args


def lean_cpu_target():  # type: ignore[no-untyped-def]
    """A 2-core `llvm` target, with only the CPU's tensor intrinsics registered (as every farm process)."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": 2})


def mlp_tiny_tasks(target):  # type: ignore[no-untyped-def]
    """mlp-tiny's tuning tasks in the CPU's default form (prepacked weights, blocked activations)."""
    from foundation.compile import extract_tuning_tasks
    from foundation.models.loading import load_model

    return extract_tuning_tasks(load_model("mlp-tiny", 1), target, prepack=True, block_activations=True)
