"""One set of MetaSchedule database assertions, run on TVM's databases and on the registry's."""

from __future__ import annotations

import json

import pytest

from foundation.meta_schedule.database.registry_database import (
    RegistryDatabase,
    canonical_target_json,
    tvm_database_for,
)
from foundation.registry import RegistryStore

from support.registry_db import fresh_postgres_database
from support.tvm_records import layout_rewrite_record, matmul_module, tuning_record

tvm = pytest.importorskip("tvm")
from tvm.s_tir import meta_schedule as ms  # noqa: E402

TVM_VERSION = tvm.__version__
FINGERPRINT = "cpu-aaaa"


@pytest.fixture
def registry(registry_url):
    store = RegistryStore(registry_url)
    store.upsert_fingerprint(FINGERPRINT, "cpu", "test cpu", {})
    store.upsert_fingerprint("cpu-bbbb", "cpu", "another cpu", {})
    yield store
    store.dispose()


def _registry_database(store, **overrides):  # type: ignore[no-untyped-def]
    scope = (
        dict(
            fingerprint_id=FINGERPRINT,
            target=canonical_target_json("llvm"),
            tvm_version=TVM_VERSION,
            software={"llvm": "test"},
        )
        | overrides
    )
    return RegistryDatabase(store, **scope)


@pytest.fixture(params=["memory", "json", "registry-sqlite", "registry-postgres"])
def database(request, tmp_path):  # type: ignore[no-untyped-def]
    kind = request.param
    if kind == "memory":
        yield ms.database.MemoryDatabase()
    elif kind == "json":
        yield ms.database.JSONDatabase(work_dir=str(tmp_path))
    elif kind == "registry-sqlite":
        store = RegistryStore(f"sqlite:///{tmp_path / 'registry.db'}")
        store.upsert_fingerprint(FINGERPRINT, "cpu", "test cpu", {})
        yield _registry_database(store)
        store.dispose()
    else:
        url, drop = fresh_postgres_database(request.getfixturevalue("postgres_admin"))
        store = RegistryStore(url)
        store.upsert_fingerprint(FINGERPRINT, "cpu", "test cpu", {})
        try:
            yield _registry_database(store)
        finally:
            store.dispose()
            drop()


def _means(records) -> list[float]:  # type: ignore[no-untyped-def]
    return [sum(float(v) for v in r.run_secs) / len(r.run_secs) for r in records]


def _factors(records) -> list[int]:  # type: ignore[no-untyped-def]
    """Which split factor each record's trace used (the tests give every trace its own)."""
    return [int(json.loads(json.dumps(r.as_json()[0]))[0][-1][1][-1]) for r in records]


# -- the shared assertions ---------------------------------------------------------


def test_workloads(database):
    mod = matmul_module(64)
    assert not database.has_workload(mod)
    workload = database.commit_workload(mod)
    assert database.has_workload(mod)
    assert database.has_workload(matmul_module(64))  # structurally equal, another object
    assert not database.has_workload(matmul_module(32))
    again = database.commit_workload(matmul_module(64))
    tvm.ir.assert_structural_equal(again.mod, workload.mod)
    assert len(database) == 0


def test_top_k_all_records_and_queries(database):
    mod, other_mod = matmul_module(64), matmul_module(32)
    workload, other = database.commit_workload(mod), database.commit_workload(other_mod)
    for factor, run_secs in [
        (2, [3e-3]),
        (4, [1e-3, 2e-3]),
        (8, None),
        (16, [1e10]),
        (32, [5e-4, 1e10]),
        (1, [4e-3]),
    ]:
        database.commit_tuning_record(tuning_record(workload, factor, run_secs))
    database.commit_tuning_record(tuning_record(other, 2, [1e-6]))

    top = database.get_top_k(workload, 3)
    assert _factors(top) == [4, 2, 1]
    assert _means(top) == pytest.approx([1.5e-3, 3e-3, 4e-3])
    # [5e-4, 1e10] is valid (one real time) but its mean ranks it last.
    assert _factors(database.get_top_k(workload, 10)) == [4, 2, 1, 32]
    assert database.get_top_k(workload, 0) == []
    assert _factors(database.get_top_k(other, 5)) == [2]
    assert len(database) == 7
    assert sorted(_factors(database.get_all_tuning_records())) == [1, 2, 2, 4, 8, 16, 32]

    best = database.query_tuning_record(mod, tvm.target.Target("llvm"), "main")
    assert _factors([best]) == [4]
    schedule = database.query_schedule(mod, tvm.target.Target("llvm"), "main")
    assert len(schedule.get_loops(schedule.get_sblock("matmul"))) == 4
    ir_module = database.query_ir_module(mod, tvm.target.Target("llvm"), "main")
    tvm.ir.assert_structural_equal(ir_module, schedule.mod)
    assert (
        database.query_tuning_record(matmul_module(16), tvm.target.Target("llvm"), "main") is None
    )


def test_records_with_a_layout_rewrite_round_trip(database):
    """A prepacked workload's candidates carry TransformLayout (an IndexMap input), which TVM's
    Python TuningRecord.as_json() refuses; every database keeps and applies them."""
    mod = matmul_module(64)
    workload = database.commit_workload(mod)
    for block, run_secs in [(8, [2e-3]), (4, [1e-3])]:
        database.commit_tuning_record(layout_rewrite_record(workload, block, run_secs))
    [best] = database.get_top_k(workload, 1)
    assert [inst.kind.name for inst in best.trace.insts][-1] == "TransformLayout"
    schedule = database.query_schedule(mod, tvm.target.Target("llvm"), "main")
    expected = tvm.s_tir.Schedule(mod)
    layout_rewrite_record(workload, 4, [1e-3]).trace.apply_to_schedule(expected, remove_postproc=False)
    tvm.ir.assert_structural_equal(schedule.mod, expected.mod)
    read_shapes = [[int(x) for x in r.source.shape] for r in schedule.get(schedule.get_sblock("matmul")).reads]
    assert [16, 64, 4] in read_shapes  # B's 64 rows, in blocks of 4


# -- what only the registry does -----------------------------------------------------


def test_records_reach_sql_in_batches_and_on_flush(registry):
    database = _registry_database(registry, flush_every=3)
    workload = database.commit_workload(matmul_module(64))
    database.commit_tuning_record(tuning_record(workload, 2, [1e-3]))
    database.commit_tuning_record(tuning_record(workload, 4, [2e-3]))
    assert registry.records.count_records() == 0  # buffered
    database.commit_tuning_record(tuning_record(workload, 8, [3e-3]))
    assert registry.records.count_records() == 3
    database.commit_tuning_record(tuning_record(workload, 16, [4e-3]))
    assert database.flush() == 1
    assert registry.records.count_records() == 4
    database.commit_tuning_record(tuning_record(workload, 16, [9e-3]))  # same trace again
    assert len(database) == 4


def test_a_new_database_starts_warm_but_only_in_its_scope(registry, registry_url):
    job_database = tvm_database_for(
        registry,
        FINGERPRINT,
        canonical_target_json("llvm"),
        TVM_VERSION,
        {"llvm": "test"},
        job_id="job-1",
    )
    workload = job_database.commit_workload(matmul_module(64))
    for factor, secs in [(2, 2e-3), (4, 1e-3)]:
        job_database.commit_tuning_record(tuning_record(workload, factor, [secs]))
    job_database.flush()
    assert {r.job_id for r in registry.records.all_records()} == {"job-1"}

    later = RegistryStore(registry_url)  # another process, in effect
    try:
        warm = _registry_database(later)
        assert warm.has_workload(matmul_module(64))
        fresh_workload = warm.commit_workload(matmul_module(64))
        assert _factors(warm.get_top_k(fresh_workload, 5)) == [4, 2]
        for scope in (
            {"fingerprint_id": "cpu-bbbb"},
            {"target": canonical_target_json({"kind": "llvm", "num-cores": 2})},
            {"tvm_version": "0.26.0"},
        ):
            cold = _registry_database(later, **scope)
            assert cold.get_top_k(cold.commit_workload(matmul_module(64)), 5) == []
            assert len(cold) == 0
    finally:
        later.dispose()


def test_workloads_are_parsed_once(registry, monkeypatch):
    database = _registry_database(registry)
    workload = database.commit_workload(matmul_module(64))
    database.commit_tuning_record(tuning_record(workload, 2, [1e-3]))
    database.flush()
    parsed = []
    original = ms.database.Workload.from_json
    monkeypatch.setattr(
        ms.database.Workload, "from_json", staticmethod(lambda j: parsed.append(1) or original(j))
    )
    for _ in range(3):
        assert database.has_workload(matmul_module(64))
        assert len(database.get_top_k(workload, 1)) == 1
    assert parsed == []
