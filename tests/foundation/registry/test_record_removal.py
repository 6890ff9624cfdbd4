"""Tuning records removed on request (foundation.registry.record_removal), on SQLite and PostgreSQL:
chosen within one fingerprint by id, workload or model, deleted with their measurements, others kept."""

from __future__ import annotations

import pytest

from foundation.errors import NotFound
from foundation.registry import NewRecord
from foundation.registry.record_removal import BATCH, RecordChoice
from foundation.registry.schema import JobTaskRow
from foundation.registry.session import Changes

TARGET = '{"kind":"llvm"}'


def _record(workload_id: int, trace: str, run_secs: list[float], fingerprint_id: str = "cpu-aaaa",
            job_id: str | None = None) -> NewRecord:
    return NewRecord(workload_id=workload_id, fingerprint_id=fingerprint_id, target=TARGET, tvm_version="0.27.0",
                     trace=trace, run_secs=run_secs, job_id=job_id)


@pytest.fixture
def seeded(store):  # type: ignore[no-untyped-def]
    """Three workloads; a model whose coordinator job planned w1 and whose embedded job measured w2;
    records of both fingerprints, one of them measured twice."""
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    store.upsert_fingerprint("cpu-bbbb", "cpu", "other cpu", {})
    w1, w2, w3 = (store.records.commit_workload(str(n), f'["{n}","bW9k{n}"]') for n in (1, 2, 3))
    model = store.upsert_model(model_id="m1", name="mlp", source="zoo", source_digest="d", batch=1, inputs=[],
                               weights=[], num_parameters=0)
    store.upsert_model(model_id="m2", name="mlp", source="zoo", source_digest="d", batch=2, inputs=[],
                       weights=[], num_parameters=0)
    planned = store.create_job(model_id=model.id, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1,
                               options={})
    embedded = store.create_job(model_id=model.id, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1,
                                options={})
    with store.unit_of_work.write(Changes.STATE) as session:
        session.add(JobTaskRow(job_id=planned.id, index=0, name="dense", weight=1, flop=1.0, workload_shash="1",
                               mod_json="{}", workload_id=w1, trials_budget=1))
    store.records.add_tuning_records([
        _record(w1, '["a"]', [1e-5]),
        _record(w2, '["b"]', [2e-5], job_id=embedded.id),
        _record(w3, '["c"]', [3e-5]),
        _record(w1, '["a"]', [1e-5], fingerprint_id="cpu-bbbb"),
    ])
    store.records.add_tuning_records([_record(w1, '["a"]', [1.5e-5])])  # a later measurement of the first
    ids = {(r.workload_id, r.fingerprint_id): r.id for r in store.records.all_records()}
    return store, (w1, w2, w3), ids


def _chosen(store, **choice) -> list[int]:  # type: ignore[no-untyped-def]
    return [r.id for batch in store.record_removal.chosen(RecordChoice("cpu-aaaa", **choice)) for r in batch]


def test_records_are_chosen_by_id_workload_or_model_within_the_fingerprint(seeded):
    store, (w1, w2, w3), ids = seeded
    mine = {w: ids[(w, "cpu-aaaa")] for w in (w1, w2, w3)}
    assert _chosen(store, record_ids=(mine[w3],)) == [mine[w3]]
    assert _chosen(store, workload_ids=(w1,)) == [mine[w1]]  # not cpu-bbbb's record of w1
    # The model's workloads: the one its coordinator job planned and the one its embedded job measured.
    assert _chosen(store, model_ids=("m1",)) == sorted([mine[w1], mine[w2]])
    assert _chosen(store, model_ids=("m2",)) == []
    assert _chosen(store, record_ids=(mine[w3],), workload_ids=(w1,)) == sorted([mine[w1], mine[w3]])
    assert _chosen(store, every=True) == sorted(mine.values())


def test_ids_the_registry_lacks_or_of_another_fingerprint_are_named(seeded):
    store, (w1, _w2, _w3), ids = seeded
    with pytest.raises(NotFound, match="no tuning record 999"):
        _chosen(store, record_ids=(999,))
    with pytest.raises(NotFound, match="no workload 999"):
        _chosen(store, workload_ids=(999,))
    with pytest.raises(NotFound, match=r"is not of fingerprint cpu-aaaa but of cpu-bbbb") as refused:
        _chosen(store, record_ids=(ids[(w1, "cpu-bbbb")],))
    assert "--fingerprint cpu-bbbb" in refused.value.fix


def test_removal_takes_the_measurements_and_leaves_the_rest(seeded):
    store, (w1, w2, w3), ids = seeded
    first = ids[(w1, "cpu-aaaa")]
    assert len(store.records.measurements_of(first)) == 2
    removed = store.record_removal.remove([first, ids[(w2, "cpu-aaaa")], 10**12])
    assert (removed.records, removed.measurements) == (2, 1)
    left = {(r.workload_id, r.fingerprint_id) for r in store.records.all_records()}
    assert left == {(w3, "cpu-aaaa"), (w1, "cpu-bbbb")}
    assert store.records.measurements_of(first) == []
    assert store.record_removal.remove([first]).records == 0  # gone already: nothing, no error


def test_many_records_come_in_batches_and_go_in_one_removal(store):
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    workload = store.records.commit_workload("1", '["1","bW9k"]')
    count = BATCH * 2 + 3
    store.records.add_tuning_records([_record(workload, f'["t{n}"]', [1e-5]) for n in range(count)])
    batches = list(store.record_removal.chosen(RecordChoice("cpu-aaaa", workload_ids=(workload,))))
    assert [len(b) for b in batches] == [BATCH, BATCH, 3]
    ids = [r.id for b in batches for r in b]
    assert ids == sorted(ids)
    assert store.record_removal.remove(ids).records == count
    assert store.records.all_records() == []
