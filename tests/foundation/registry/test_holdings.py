"""What the registry holds per fingerprint (`farm registry show`)."""

from __future__ import annotations

from foundation.registry import NewRecord

TARGET = '{"kind":"llvm"}'


def _record(workload_id: int, fingerprint_id: str, trace: str, run_secs) -> NewRecord:  # type: ignore[no-untyped-def]
    return NewRecord(workload_id=workload_id, fingerprint_id=fingerprint_id, target=TARGET, tvm_version="0.27.0",
                     trace=trace, run_secs=run_secs)


def _model(store, model_id: str) -> str:  # type: ignore[no-untyped-def]
    return store.upsert_model(model_id=model_id, name=model_id, source="zoo", source_digest="d", batch=1, inputs=[],
                              weights=[], num_parameters=0).id


def test_each_fingerprint_counts_its_own_records_workloads_models_and_artifacts(store):
    store.upsert_fingerprint("cpu-aaaa", "cpu", "first cpu", {})
    store.upsert_fingerprint("cpu-bbbb", "cpu", "second cpu", {})
    store.upsert_fingerprint("cuda-cccc", "cuda", "a gpu", {})
    w1, w2 = store.records.commit_workload("1", '["1","YQ=="]'), store.records.commit_workload("2", '["2","Yg=="]')
    store.records.add_tuning_records([
        _record(w1, "cpu-aaaa", '"a"', [0.001]), _record(w1, "cpu-aaaa", '"b"', None),
        _record(w2, "cpu-aaaa", '"c"', [0.002]), _record(w2, "cpu-bbbb", '"a"', [0.003]),
    ])
    # A second measurement: still one record.
    store.records.add_tuning_records([_record(w1, "cpu-aaaa", '"a"', [0.0012])])
    m1, m2 = _model(store, "m1"), _model(store, "m2")
    for model_id in (m1, m2, m1):
        store.create_job(model_id=model_id, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    store.create_job(model_id=m2, target=TARGET, fingerprint_id="cpu-bbbb", trials_budget=1, options={})
    kept = dict(target=TARGET, job_id=None, library=b"lib", lib_format="so",
                latency={"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.0}, untuned_latency_mean_ms=None,
                validation={"passed": True}, tvm_version="0.27.0", software={})
    store.add_artifact(model_id=m1, fingerprint_id="cpu-aaaa", **kept)
    broken = store.add_artifact(model_id=m2, fingerprint_id="cpu-aaaa", **kept)
    store.invalidate_artifact(broken.id, "sha256 mismatch")

    store.cost_models.save("cpu-aaaa", "0.27.0", "xgb", b"model", last_record_id=1, samples=3, workloads=2)
    store.cost_models.save("cpu-aaaa", "0.27.0", "xgb", b"retrained", last_record_id=2, samples=3, workloads=2)

    held = {h.id: h for h in store.holdings.per_fingerprint()}
    assert list(held) == ["cpu-aaaa", "cpu-bbbb", "cuda-cccc"]
    a, b, c = held.values()
    assert (a.records, a.valid_records, a.workloads, a.models, a.artifacts) == (3, 2, 2, 2, 1)
    assert (b.records, b.valid_records, b.workloads, b.models, b.artifacts) == (1, 1, 1, 1, 0)
    assert (c.kind, c.records, c.workloads, c.models, c.artifacts) == ("cuda", 0, 0, 0, 0)
    # One per fingerprint and TVM version, replaced as it learns.
    assert (a.cost_models, b.cost_models) == (1, 0)
    assert a.to_json()["summary"] == "first cpu"
