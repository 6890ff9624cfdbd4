"""Trace transfer: another workload's schedule replayed on a workload's own design space, or refused."""

from __future__ import annotations

from foundation.meta_schedule.warm.transplant import Transplanter, refit_tile

from support.tvm_records import matmul_module


def test_tiles_keep_inner_factors_that_divide_and_the_outermost_takes_the_rest():
    assert refit_tile([2, 64, 1, 1], 128) == [2, 64, 1, 1]
    assert refit_tile([2, 64, 1, 1], 200) == [25, 8, 1, 1]
    assert refit_tile([1, 4, 2, 16], 96) == [3, 1, 2, 16]
    assert refit_tile([7, 1], 3) == [3, 1]


def _sampled_trace(mod, target, seed: int):
    """One random point of ``mod``'s design space, as the search would sample it."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="donor")
    space = context.generate_design_space()[0]
    schedule = Schedule(mod, seed=seed)
    space.trace.apply_to_schedule(schedule, remove_postproc=True)
    return schedule.trace


def _elementwise_module(n: int = 64):
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: a[i, j] * 2.0, name="scale")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def test_a_matmul_schedule_lands_on_another_matmul_as_a_valid_program_with_the_donors_tiles(target):
    import numpy as np
    import tvm

    donor = _sampled_trace(matmul_module(64), target, seed=7)
    new = matmul_module(96)
    schedule = Transplanter(target).apply(donor, new)
    assert schedule is not None
    tiles = {tuple(int(v) for v in d) for i, d in schedule.trace.decisions.items()
             if i.kind.name == "SamplePerfectTile"}
    donor_tiles = [[int(v) for v in d] for i, d in donor.decisions.items() if i.kind.name == "SamplePerfectTile"]
    assert tiles == {tuple(refit_tile(t, 96)) for t in donor_tiles}
    # Post-processed (parallel, vectorized loops in place of the annotations) and it computes a matmul.
    assert "EnterPostproc" in [i.kind.name for i in schedule.trace.insts]
    built = tvm.compile(schedule.mod, target=target)
    a, b = np.random.rand(96, 96).astype("float32"), np.random.rand(96, 96).astype("float32")
    c = tvm.runtime.tensor(np.zeros((96, 96), "float32"))
    built(tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)


def test_a_trace_of_another_structure_is_refused_without_raising(target):
    donor = _sampled_trace(matmul_module(64), target, seed=3)
    assert Transplanter(target).apply(donor, _elementwise_module()) is None
    back = _sampled_trace(_elementwise_module(), target, seed=3)
    assert Transplanter(target).apply(back, matmul_module(64)) is None
