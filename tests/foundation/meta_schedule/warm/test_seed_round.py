"""The seed round: each task's best seed first; its other seeds only where the best one beat
the task's untuned form (real builds and runs of a matmul's transplanted schedules)."""

from __future__ import annotations

import pytest

from foundation.meta_schedule.warm.seed_round import SeedRound
from foundation.meta_schedule.warm.seed_sources import SeedTrace

from support.tvm_records import matmul_module

pytestmark = pytest.mark.slow


def _donors(target, count: int) -> list[SeedTrace]:
    """``count`` distinct sampled schedules of a 64^3 matmul, as the registry would offer them."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import Workload

    mod = matmul_module(64)
    space = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                           task_name="donor").generate_design_space()[0]
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.schedule import Trace

    from foundation.meta_schedule.database.record_to_json import tuning_record_json
    from foundation.registry.reported_records import canonical_json

    workload = Workload(mod)
    workload_json = canonical_json(workload.as_json())  # as the registry stores them
    donors, seen = [], set()
    for seed in range(1, 200):
        schedule = Schedule(mod, seed=seed)
        # Without the space's own decisions, every sampling instruction samples anew.
        Trace(space.trace.insts, {}).apply_to_schedule(schedule, remove_postproc=True)
        record = TuningRecord(schedule.trace, workload, [1e-4], target)
        trace_json = canonical_json(tuning_record_json(record)[0])
        if trace_json not in seen:
            seen.add(trace_json)
            donors.append(SeedTrace(workload_json, trace_json, "cpu-donor", own=True, mean_sec=1e-4 * len(donors)))
        if len(donors) == count:
            break
    return donors


@pytest.fixture(scope="module")
def pools():
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools

    with WorkerPools(MeasureSettings(min_repeat_ms=1)) as made:
        yield made.get("llvm")


def _round_after_untuned(target, pools, untuned_sec: float) -> tuple[SeedRound, object]:
    """A seed round of one task (a 96^3 matmul) offered three donors, over a database that holds
    the task's untuned form timed at ``untuned_sec``; its best seed measured."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.untuned_form import untuned_schedule

    mod = matmul_module(96)
    database = ms.database.MemoryDatabase()
    untuned = untuned_schedule(mod)
    database.commit_tuning_record(TuningRecord(untuned.trace, database.commit_workload(mod), [untuned_sec], target,
                                               ArgInfo.from_entry_func(untuned.mod, remove_preproc=True)))
    builder, runner = pools
    context = ms.TuneContext(mod=mod, target=target, task_name="matmul")
    seeds = SeedRound([context], [_donors(target, 3)], 3, target, builder, runner, database)
    seeds.measure_best()
    return seeds, database


def test_a_task_whose_best_seed_lost_to_its_untuned_form_gets_no_more_seeds(target, pools):
    # The untuned form at a nanosecond: no schedule of a 96^3 matmul beats it.
    seeds, _ = _round_after_untuned(target, pools, untuned_sec=1e-9)
    assert seeds.report.per_task == [1]
    seeds.measure_rest()
    report = seeds.finish()
    assert report.per_task == [1] and report.held_back == 2 and report.trials == 1


def test_a_task_whose_best_seed_beat_its_untuned_form_measures_the_rest(target, pools):
    # The untuned form at ten seconds: any measured schedule beats it.
    seeds, database = _round_after_untuned(target, pools, untuned_sec=10.0)
    seeds.measure_rest()
    report = seeds.finish()
    assert report.per_task == [3] and report.held_back == 0 and report.trials == 3 and report.failed == 0
    workload = database.commit_workload(matmul_module(96))
    assert len(database.get_top_k(workload, 10)) == 4  # the untuned form and the three seeds
