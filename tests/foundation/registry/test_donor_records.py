"""The best records of each workload on each fingerprint, the donors of warm-start seeds."""

from __future__ import annotations

from foundation.registry.entities import NewRecord


def _record(workload_id: int, fingerprint: str, trace: str, secs: list[float] | None,
            tvm_version: str = "0.27") -> NewRecord:
    return NewRecord(workload_id=workload_id, fingerprint_id=fingerprint, target='{"kind":"llvm"}',
                     tvm_version=tvm_version, trace=trace, run_secs=secs)


def test_the_fastest_valid_records_of_each_workload_per_fingerprint_of_one_tvm(store):
    store.upsert_fingerprint("cpu-a", "cpu", "a", {})
    store.upsert_fingerprint("cpu-b", "cpu", "b", {})
    w1 = store.records.commit_workload("1", '{"w": 1}')
    w2 = store.records.commit_workload("2", '{"w": 2}')
    store.records.add_tuning_records([
        _record(w1, "cpu-a", "t1", [3.0]), _record(w1, "cpu-a", "t2", [1.0]), _record(w1, "cpu-a", "t3", [2.0]),
        _record(w1, "cpu-a", "failed", [1e10]),  # a failed measurement is never a donor
        _record(w1, "cpu-b", "t1", [5.0]),
        _record(w2, "cpu-a", "t4", [4.0]),
        _record(w2, "cpu-a", "old", [0.5], tvm_version="0.26"),  # another TVM's traces need not replay
    ])
    best = store.donors.best_per_workload("0.27", per_workload=2)
    assert [(r.workload_id, r.fingerprint_id, r.trace, r.mean_sec) for r in best] == [
        (w1, "cpu-a", "t2", 1.0), (w1, "cpu-a", "t3", 2.0), (w1, "cpu-b", "t1", 5.0), (w2, "cpu-a", "t4", 4.0)]
    only_b = store.donors.best_per_workload("0.27", per_workload=1, fingerprint_ids=["cpu-b"])
    assert [(r.workload_id, r.trace) for r in only_b] == [(w1, "t1")]
