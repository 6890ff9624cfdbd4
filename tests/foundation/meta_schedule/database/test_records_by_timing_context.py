"""Tuning records keep the cache state they were timed in, and are ranked only beside records timed in
the same one: a real `auto` tune into the registry and into an agent's shard database, then what a
reader of another context, or of the same, is served."""

from __future__ import annotations

import dataclasses

import pytest

from foundation.config import CPU_CACHE_FLUSH_ENV, SHIPPED_PACKS_ENV, TIMING_CONTEXT_ENV
from foundation.domain.timing_context import TimingContext
from foundation.meta_schedule.database.registry_database import RegistryDatabase, canonical_target_json
from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
from foundation.meta_schedule.timing_context import buffer_roles
from foundation.registry import RegistryStore

from support.tvm_records import lean_cpu_target, mlp_tiny_tasks

pytestmark = pytest.mark.slow

FINGERPRINT = "cpu-aaaa"
# 16 KiB: mlp-tiny's first layer's 32 KiB of weights outgrow it, the second's 5 KiB fit.
L2_KIB = 16


@pytest.fixture(scope="module")
def target():
    return lean_cpu_target()


@pytest.fixture(scope="module")
def dense(target):
    """mlp-tiny's two dense tasks in the CPU's default form: (large weights, small weights)."""
    tasks = mlp_tiny_tasks(target)
    large, small = sorted((t for t in tasks if "matmul" in t.name), key=lambda t: -buffer_roles(t.mod).weight_bytes)
    return large, small


@pytest.fixture
def nothing_asked(monkeypatch):
    """No context in the environment and no shipped pack's choice: a reader's context is what a test sets."""
    for name in (TIMING_CONTEXT_ENV, CPU_CACHE_FLUSH_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(SHIPPED_PACKS_ENV, "0")


@pytest.fixture
def store(tmp_path):
    registry = RegistryStore(f"sqlite:///{tmp_path / 'registry.db'}")
    registry.upsert_fingerprint(FINGERPRINT, "cpu", "test cpu", {"device": {"l2_kib": L2_KIB}})
    yield registry
    registry.dispose()


def database(store, target) -> RegistryDatabase:
    return RegistryDatabase(store, FINGERPRINT, canonical_target_json(target), software={"llvm": "test"})


def tuned_auto(store, target, dense, work) -> None:
    from foundation.meta_schedule import tuner

    settings = MeasureSettings(timing_context=TimingContext.AUTO, l2_kib=L2_KIB, min_repeat_ms=5)
    db = database(store, target)
    with WorkerPools(settings) as pools:
        report = tuner.tune(list(dense), target, db, tuner.TuningBudget(4, 2, 2), work, pools=pools, seed=1)
    assert report.trials > 0


def contexts_of(store, workload_ids) -> set[str]:
    return {r.timing_context for r in store.records.all_records(workload_ids)}


def test_a_tune_files_each_record_under_its_tasks_context_and_readers_rank_in_one(store, target, dense, tmp_path,
                                                                                  monkeypatch, nothing_asked):
    large, small = dense
    tuned_auto(store, target, dense, tmp_path / "tune")
    reader = database(store, target)
    large_ids, small_ids = reader._matching_ids(large.mod), reader._matching_ids(small.mod)
    assert contexts_of(store, large_ids) == {"weights"} and contexts_of(store, small_ids) == {"warm"}

    # The same trace timed warm (a pack recorded before, another box's sync) is a record of its own, and
    # looks faster than any record timed after a flush.
    (timed_flushed,) = store.records.top_k_records(large_ids, FINGERPRINT, reader.target_json, reader.tvm_version, 1)
    warm_copy = dataclasses.replace(timed_flushed, run_secs=[1e-7])
    store.records.add_tuning_records([_new(warm_copy, "warm")])
    assert contexts_of(store, large_ids) == {"weights", "warm"}
    weights_count = store.records.measured_counts(large_ids, FINGERPRINT, reader.target_json, reader.tvm_version,
                                                  "weights")

    # A reader timing in auto (the pack's or the environment's choice) ranks the large task's weights
    # records alone: the warm one, faster on paper, is not served; the small task's stay warm.
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "auto")
    auto = database(store, target)
    assert auto.timing_context_of(large_ids[0], large.mod) == "weights"
    [best] = auto.get_top_k(auto.commit_workload(large.mod), 1)
    assert [float(s) for s in best.run_secs] == timed_flushed.run_secs
    assert auto.measured_count(large.mod) == sum(weights_count.values())
    assert auto.get_top_k(auto.commit_workload(small.mod), 1)

    # A warm reader ranks the warm records: the copy is its best.
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "warm")
    warm = database(store, target)
    [best] = warm.get_top_k(warm.commit_workload(large.mod), 1)
    assert [float(s) for s in best.run_secs] == [1e-7] and warm.measured_count(large.mod) == 1


def test_a_reader_of_a_context_nothing_was_timed_in_ranks_the_one_that_was(store, target, dense, monkeypatch,
                                                                           nothing_asked):
    """A box that now tunes in auto, with only warm records of a task (its pack's): served those, until
    it has records of its own context."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    from foundation.meta_schedule.database.record_to_json import tuning_record_json
    from foundation.registry.reported_records import new_record_from

    large, _small = dense
    monkeypatch.setenv(TIMING_CONTEXT_ENV, "auto")
    db = database(store, target)
    workload = db.commit_workload(large.mod)
    (workload_id,) = db._matching_ids(large.mod)
    trace = split_trace(large.mod)
    pack_record = new_record_from(tuning_record_json(TuningRecord(trace, workload, [2e-5], target, None)),
                                  workload_id=workload_id, fingerprint_id=FINGERPRINT, target_json=db.target_json,
                                  tvm_version=db.tvm_version)
    assert pack_record.timing_context == "warm"  # what a record says where nothing says otherwise
    store.records.add_tuning_records([pack_record])
    assert db.timing_context_of(workload_id, large.mod) == "weights"
    [served] = db.get_top_k(workload, 5)
    assert [float(s) for s in served.run_secs] == [2e-5] and db.measured_count(large.mod) == 1

    # Its own record of the same trace, timed after a flush: a second record, now the only one ranked.
    db.commit_tuning_record(TuningRecord(trace, workload, [3e-5], target, None))
    [served] = db.get_top_k(workload, 5)
    assert [float(s) for s in served.run_secs] == [3e-5] and db.measured_count(large.mod) == 1
    assert {r.timing_context for r in store.records.all_records(workload_id)} == {"warm", "weights"}


def split_trace(mod):  # type: ignore[no-untyped-def]
    """A trace of ``mod`` MetaSchedule accepts: its first block's outer loop split in two."""
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    sch.split(sch.get_loops(block)[0], [None, 2])
    return sch.trace


def test_an_agents_shard_reports_each_record_with_its_tasks_context(target, dense, tmp_path):
    import tvm_ffi

    from foundation.meta_schedule import tuner
    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database

    large, small = dense
    shash = {str(tvm_ffi.structural_hash(t.mod)): t.name for t in dense}
    sent: list = []
    db = shard_database([(s, t.mod) for s, t in zip(shash, dense)], [], sent.extend, ReportBatching(records=4))
    settings = MeasureSettings(timing_context=TimingContext.AUTO, l2_kib=L2_KIB, min_repeat_ms=5)
    with WorkerPools(settings) as pools:
        tuner.tune([large, small], target, db, tuner.TuningBudget(4, 2, 2), tmp_path, pools=pools, seed=1)
    db.flush()
    db.close()
    assert sent
    assert {(shash[s], context) for s, _, context in sent} == {(large.name, "weights"), (small.name, "warm")}


def test_a_tunes_cost_model_labels_each_tasks_samples_within_its_context(store, target, dense, tmp_path):
    """The search's model, and a model later taught the registry's records, group the large task's samples
    (timed after its weights were flushed) apart from warm ones of the same workload."""
    import json

    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import Workload
    from tvm.s_tir.meta_schedule.utils import shash2hex

    from foundation.meta_schedule import tuner
    from foundation.meta_schedule.warm import WarmStart
    from foundation.meta_schedule.warm.cost_models import learn, new_model

    hashes = [shash2hex(ms.TuneContext(mod=t.mod, target=target, task_name=t.name).mod) for t in dense]
    searched = new_model()
    settings = MeasureSettings(timing_context=TimingContext.AUTO, l2_kib=L2_KIB, min_repeat_ms=5)
    with WorkerPools(settings) as pools:
        tuner.tune(list(dense), target, database(store, target), tuner.TuningBudget(8, 4, 2), tmp_path, pools=pools,
                   seed=1, warm=WarmStart(cost_model=searched))
    expected = {f"{hashes[0]}@weights", hashes[1]}
    assert set(searched.data) == expected

    recorded = [r for r in store.records.all_records(fingerprint_id=FINGERPRINT) if r.mean_sec is not None]
    modules = {i: Workload.from_json(json.loads(mod_json)).mod
               for i, (_shash, mod_json) in store.records.get_workloads({r.workload_id for r in recorded}).items()}
    taught = new_model()
    assert learn(taught, target, modules, recorded) == len(recorded)
    assert set(taught.data) == expected


def _new(stored, context: str):  # type: ignore[no-untyped-def]
    """A stored record as a new one timed in ``context``."""
    from foundation.registry.entities import NewRecord

    return NewRecord(workload_id=stored.workload_id, fingerprint_id=stored.fingerprint_id, target=stored.target,
                     tvm_version=stored.tvm_version, trace=stored.trace, run_secs=stored.run_secs,
                     args_info=stored.args_info, software=stored.software, timing_context=context)
