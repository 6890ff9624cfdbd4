"""A cost model keeps a workload's samples of each timing context in a group of their own: XGBModel labels
a sample by the fastest of its group, and a time taken after a flush does not compare with a warm one.
Real XGBModels learning from real schedules of a matmul; what a real tune files is in
tests/foundation/meta_schedule/database/test_records_by_timing_context.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pytest

from foundation.registry.entities import StoredRecord

from support.tvm_records import lean_cpu_target, matmul_module, split_trace, tuning_record

WORKLOAD = 7
# Each context's times, by the split factor of the schedule timed: the flushed ones all slower.
WARM_TIMES = {2: 1.0e-3, 4: 2.0e-3, 8: 3.0e-3}
WEIGHTS_TIMES = {2: 4.0e-3, 4: 5.0e-3, 8: 6.0e-3}


@pytest.fixture(scope="module")
def target():
    return lean_cpu_target()


@pytest.fixture(scope="module")
def mod():
    return matmul_module(64)


@pytest.fixture(scope="module")
def module_hash(mod, target):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import shash2hex

    return shash2hex(ms.TuneContext(mod=mod, target=target, task_name="hash").mod)


def record(mod, factor: int, seconds: float, timing_context: str, record_id: int) -> StoredRecord:
    from tvm.s_tir.meta_schedule.database import Workload

    from foundation.meta_schedule.database.record_to_json import tuning_record_json

    trace, *_ = tuning_record_json(tuning_record(Workload(mod), factor, [seconds]))
    return StoredRecord(id=record_id, workload_id=WORKLOAD, fingerprint_id="cpu-aaaa", target='{"kind":"llvm"}',
                        tvm_version="0.27.0", software={}, trace=json.dumps(trace),
                        args_info=None, run_secs=[seconds], mean_sec=seconds, job_id=None,
                        record_digest=f"d{record_id}", created_at=datetime.now(timezone.utc),
                        timing_context=timing_context)


def records(mod, times: dict[int, float], timing_context: str, first_id: int) -> list[StoredRecord]:
    return [record(mod, factor, seconds, timing_context, first_id + i)
            for i, (factor, seconds) in enumerate(times.items())]


def candidates_and_results(mod, times: dict[int, float]):
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.schedule import Trace

    candidates, results = [], []
    for factor, seconds in times.items():
        schedule = Schedule(mod)
        Trace.apply_json_to_schedule(split_trace(mod, factor).as_json(), schedule)
        candidates.append(MeasureCandidate(schedule, ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)))
        results.append(RunnerResult(run_secs=[seconds], error_msg=None))
    return candidates, results


def groups_of(model) -> dict[str, tuple[int, float]]:
    """Each group's key: (its samples, the fastest time it labels them by)."""
    return {key: (len(group.costs), float(group.min_cost)) for key, group in model.data.items()}


def test_learning_keeps_each_contexts_records_of_a_workload_apart(mod, target, module_hash):
    from foundation.meta_schedule.warm.cost_models import learn, model_bytes, model_from_bytes, new_model

    model = new_model()
    learned = learn(model, target, {WORKLOAD: mod},
                    records(mod, WARM_TIMES, "warm", 1) + records(mod, WEIGHTS_TIMES, "weights", 10))
    assert learned == 6 and model.booster is not None
    # Warm keeps MetaSchedule's key (the module hash); the flushed times are labelled against their own best.
    expected = {module_hash: (3, pytest.approx(1.0e-3)), f"{module_hash}@weights": (3, pytest.approx(4.0e-3))}
    assert groups_of(model) == expected

    stored = model_from_bytes(model_bytes(model))
    assert groups_of(stored) == expected

    # Learning more of one context adds to its group, the other's untouched.
    learn(stored, target, {WORKLOAD: mod}, records(mod, {16: 3.5e-3}, "weights", 20))
    assert groups_of(stored) == {module_hash: (3, pytest.approx(1.0e-3)),
                                 f"{module_hash}@weights": (4, pytest.approx(3.5e-3))}


def test_a_search_files_a_tasks_samples_in_the_group_of_the_context_it_is_timed_in(mod, target, module_hash):
    from tvm.s_tir import meta_schedule as ms

    from foundation.meta_schedule.warm.context_groups import ContextGroupedModel, grouped_by_context
    from foundation.meta_schedule.warm.cost_models import learn, new_model

    model = new_model()
    model.num_warmup_samples = 0  # its booster's scores, not XGBModel's random ones below 100 samples
    learn(model, target, {WORKLOAD: mod}, records(mod, WARM_TIMES, "warm", 1))
    context = ms.TuneContext(mod=mod, target=target, task_name="search")
    assert grouped_by_context(model, [context], ["warm"]) is model  # a search timed warm throughout: as TVM keeps it

    searching = grouped_by_context(model, [context], ["weights"])
    assert isinstance(searching, ContextGroupedModel)
    for _batch in range(2):
        searching.update(context, *candidates_and_results(mod, WEIGHTS_TIMES))
    assert groups_of(model) == {module_hash: (3, pytest.approx(1.0e-3)),
                                f"{module_hash}@weights": (6, pytest.approx(4.0e-3))}
    # It ranks with the model it files into.
    candidates, _ = candidates_and_results(mod, {32: 1.0})
    assert np.allclose(searching.predict(context, candidates), model.predict(context, candidates))
