"""The agent's shard database: warm from given records, streams what it measures in batches."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks():
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    from foundation.compile import extract_tuning_tasks
    from foundation.models.loading import load_model

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    return target, extract_tuning_tasks(load_model("mlp-tiny", 1), target)


def test_records_stream_in_batches_and_warm_the_next_shard(tasks, tmp_path):
    import tvm_ffi

    from foundation.domain.timing_context import TimingContext
    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
    from foundation.meta_schedule.tuner import TuningBudget, tune

    target, tuning_tasks = tasks
    workloads = [(str(tvm_ffi.structural_hash(t.mod)), t.mod) for t in tuning_tasks]
    batches: list[list[tuple[str, str, str]]] = []
    db = shard_database(workloads, [], batches.append, ReportBatching(records=4))
    pools = WorkerPools(MeasureSettings(min_repeat_ms=5, timing_context=TimingContext.WARM))
    report = tune(tuning_tasks, target, db, TuningBudget(12, 6, 6), tmp_path / "a", pools=pools, seed=3)
    db.flush()
    sent = [record for batch in batches for record in batch]
    assert len(sent) == report.trials == len(db)
    assert all(len(batch) <= 4 for batch in batches) and len(batches) >= 3
    assert {shash for shash, _, _ in sent} <= {shash for shash, _ in workloads}
    assert {context for _, _, context in sent} == {"warm"}

    # A second shard of the same tasks starts from those records (MetaSchedule's top-k).
    warm = [(shash, record) for shash, record, _ in sent]
    second: list = []
    db2 = shard_database(workloads, warm, lambda batch: second.extend(batch), ReportBatching(records=4))
    for shash, mod in workloads:
        top = db2.get_top_k(db2.commit_workload(mod), 1)
        assert top, f"no warm record for {shash}"
        best = min(
            sum(json.loads(r)[1]) / len(json.loads(r)[1])
            for s, r in warm if s == shash and json.loads(r)[1]
        )
        assert sum(float(x) for x in top[0].run_secs) / len(top[0].run_secs) == pytest.approx(best)
    assert second == [], "warm records are not reported back"


def test_a_failed_report_keeps_the_batch(tasks):
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database

    _, tuning_tasks = tasks
    task = tuning_tasks[0]
    calls = []

    def flaky(batch):
        calls.append(list(batch))
        if len(calls) == 1:
            raise ConnectionError("coordinator away")

    db = shard_database([(str(tvm_ffi.structural_hash(task.mod)), task.mod)], [], flaky, ReportBatching(records=100))
    import tvm

    sch = tvm.s_tir.Schedule(task.mod)
    workload = db.commit_workload(task.mod)
    db.commit_tuning_record(TuningRecord(sch.trace, workload, [1e-5], None, None))
    with pytest.raises(ConnectionError):
        db.flush()
    assert db.flush() == 1 and len(calls[1]) == 1


def test_the_search_goes_on_while_a_report_is_in_flight(tasks):
    import threading

    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database

    _, tuning_tasks = tasks
    task = tuning_tasks[0]
    answer = threading.Semaphore(0)
    in_flight = threading.Event()
    batches = []

    def slow_coordinator(batch):
        in_flight.set()
        assert answer.acquire(timeout=30)
        batches.append([json.loads(record)[1] for _, record, _ in batch])

    workloads = [(str(tvm_ffi.structural_hash(task.mod)), task.mod)]
    db = shard_database(workloads, [], slow_coordinator, ReportBatching(records=2))
    workload = db.commit_workload(task.mod)
    trace = tvm.s_tir.Schedule(task.mod).trace
    for i in range(3):  # the first two fill a batch; the third is measured while it is in flight
        db.commit_tuning_record(TuningRecord(trace, workload, [float(i + 1)], None, None))
    assert in_flight.wait(30) and batches == []  # no answer yet, and tuning went on
    answer.release()
    answer.release()
    assert db.flush() == 3
    db.close()
    assert batches == [[[1.0], [2.0]], [[3.0]]]  # run_secs of each record, in order


def test_batches_follow_the_coordinator_and_no_record_waits_past_the_bound(tasks):
    import tvm
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database

    _, tuning_tasks = tasks
    task = tuning_tasks[0]
    now = [0.0]
    batches = []
    batching = ReportBatching(records=3, within_s=10.0)
    db = shard_database([(str(tvm_ffi.structural_hash(task.mod)), task.mod)], [],
                        lambda batch: batches.append([json.loads(record)[1][0] for _, record, _ in batch]),
                        batching, clock=lambda: now[0])
    workload = db.commit_workload(task.mod)
    trace = tvm.s_tir.Schedule(task.mod).trace

    def measured(run_sec: float, at: float) -> None:
        now[0] = at
        db.commit_tuning_record(TuningRecord(trace, workload, [run_sec], None, None))

    for i in range(3):
        measured(i + 1.0, at=i)  # three records: a full batch
    db.reports.wait()
    batching.follow(5, 0.0)  # an answer asks for batches of 5 (an unset bound keeps 10 s)
    for i in range(4):
        measured(10.0 + i, at=3.0 + i)  # four records in 3 s: not yet a batch of 5
    db.reports.wait()
    assert batches == [[1.0, 2.0, 3.0]] and batching.within_s == 10.0
    measured(20.0, at=12.0)  # the fifth, 9 s after the first: a full batch
    measured(21.0, at=14.0)
    measured(22.0, at=24.5)  # the second of a batch whose first waited 10.5 s: sent, though only 2
    db.reports.wait()
    assert batches == [[1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0, 20.0], [21.0, 22.0]]
    db.close()
