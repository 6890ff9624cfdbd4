"""Warm starts with real tuning: seeds from similar workloads, this fingerprint's and others', measured first."""

from __future__ import annotations

import json
import shutil

import pytest
from sqlalchemy import create_engine, text

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.domain.job_spec import job_notes
from foundation.domain.warm_start_use import job_warm_start
from foundation.registry import RegistryStore

pytestmark = pytest.mark.slow

ELSEWHERE = "cpu-elsewhere0000"


SEEDED_TRIALS_PER_TASK = 8


def _request(registry: str, batch: int, trials_per_task: int = 4, **options) -> SubmitRequest:
    # Plain weights: the tests below look at the plain tasks' workloads.
    return SubmitRequest(model="mlp-tiny", target="llvm", batch=batch, registry=registry,
                         trials_per_task=trials_per_task, validation_runs=2, weights_layout="plain", **options)


@pytest.fixture(scope="module")
def tuned_mlp(tuned_mlp_tiny_batch_4):
    """A registry where mlp-tiny at batch 4 was tuned (cold, plain weights): the donors. Tuned once
    per test run (tests/farm/conftest.py); the tests below take copies of the file, never write it."""
    submitted = tuned_mlp_tiny_batch_4.submitted
    assert submitted["state"] == "succeeded" and submitted["weights_layout"] == "plain", submitted
    return tuned_mlp_tiny_batch_4.home / "registry.db", submitted["fingerprint"]


@pytest.fixture
def donors(tuned_mlp, tmp_path):
    """A copy of the donors' registry for one test."""
    path, fingerprint = tuned_mlp
    copy = tmp_path / "registry.db"
    shutil.copy(path, copy)
    return f"sqlite:///{copy}", fingerprint


@pytest.fixture(scope="module")
def seeded_batch_1(tuned_mlp, tmp_path_factory):
    """mlp-tiny at batch 1 tuned (warm) in a copy of the donors' registry: (url, fingerprint, result)."""
    path, fingerprint = tuned_mlp
    copy = tmp_path_factory.mktemp("seeded") / "registry.db"
    shutil.copy(path, copy)
    url = f"sqlite:///{copy}"
    # 8 trials a task: seeds take at most a quarter of a task's plan, so each task may measure two.
    return url, fingerprint, submit(_request(url, 1, trials_per_task=SEEDED_TRIALS_PER_TASK))


def _first_measured(url: str, job_id: str, count: int) -> list[tuple[int, bool]]:
    """The job's first ``count`` measurements in the order they were stored: (workload, whether it is
    a task's untuned form, foundation.meta_schedule.untuned_form)."""
    from foundation.meta_schedule.untuned_form import is_untuned_trace_json

    store = RegistryStore(url, create=False)
    try:
        mine = [r for r in store.records.all_records() if r.job_id == job_id]  # in the order stored
        return [(r.workload_id, is_untuned_trace_json(r.trace)) for r in mine][:count]
    finally:
        store.dispose()


def test_another_batch_is_seeded_from_this_fingerprint_and_validates_against_the_untuned_build(seeded_batch_1):
    url, fingerprint, result = seeded_batch_1
    assert result.job.state == "succeeded", result.job
    warm = result.to_json()["warm_start"]
    assert warm["seeds_own_fingerprint"] >= 2 and warm["seeds_other_fingerprints"] == 0, warm
    assert warm["seeds_failed"] == 0, warm
    # The built model with the seeds among its records matches TVM's untuned build.
    assert result.artifact.validation["passed"], result.artifact.validation
    # Seeds are measured trials of this job, out of its budget, stored as its own records.
    store = RegistryStore(url, create=False)
    try:
        mine = [r for r in store.records.all_records(fingerprint_id=fingerprint) if r.job_id == result.job.id]
        kept = job_warm_start(job_notes(store.get_job(result.job.id)).warm_start_used)
    finally:
        store.dispose()
    # Kept with the job as a distributed job keeps its shards' reports: `farm status` says it.
    assert {k: kept[k] for k in warm if k in kept} == warm and kept["seeds_offered"] >= warm["seeds_own_fingerprint"]
    # (A trace the search measures again is stored once.)
    assert 0 < len(mine) <= result.report.trials <= SEEDED_TRIALS_PER_TASK * len(result.report.tasks)
    assert sum(r.mean_sec is not None for r in mine) >= warm["seeds_own_fingerprint"]


def test_each_task_best_seed_is_measured_before_any_task_second(seeded_batch_1):
    url, _, result = seeded_batch_1
    seeded = [n for n in result.report.seeds.per_task if n]
    # Several tasks seeded, and a second seed offered to one at least: measured after every
    # task's best, or held back where that task's best seed lost to its untuned form.
    seeds = result.report.seeds
    assert len(seeded) >= 2 and (max(seeded) >= 2 or seeds.held_back >= 1), seeds
    # The first measurements are the seeded tasks' best seeds, one a task, before any untuned form.
    first = _first_measured(url, result.job.id, len(seeded))
    assert not any(untuned for _, untuned in first), first
    assert len({workload for workload, _ in first}) == len(seeded), first
    # The model's estimate exists once those are measured: every seeded task has a valid record.
    assert sum(1 for t in result.report.tasks if t.best_sec is not None) >= len(seeded)


def test_a_similar_model_submitted_with_defaults_is_seeded_first_across_tasks(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    # Every option the farm's default but the budget (and the validation's runs), kept small.
    donor = submit(SubmitRequest(model="mlp-tiny", target="llvm", batch=4, registry=url, trials_per_task=4,
                                 validation_runs=2))
    assert donor.job.state == "succeeded", donor.job
    result = submit(SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=url, trials_per_task=4,
                                  validation_runs=2))
    assert result.job.state == "succeeded" and not result.cache_hit, result.job
    warm = result.to_json()["warm_start"]
    assert warm["seeds_own_fingerprint"] >= 2 and warm["seeds_failed"] == 0, warm
    seeded = [n for n in result.report.seeds.per_task if n]
    first = _first_measured(url, result.job.id, len(seeded))
    assert len(seeded) >= 2 and not any(untuned for _, untuned in first), (result.report.seeds, first)
    assert len({workload for workload, _ in first}) == len(seeded), (result.report.seeds, first)


def test_an_incompatible_seed_is_rejected_and_the_task_still_tunes(donors, tmp_path):
    from foundation.compile import extract_tuning_tasks
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.meta_schedule.measure import WorkerPools
    from foundation.meta_schedule.tuner import TuningBudget, tune
    from foundation.meta_schedule.warm import SeedTrace, WarmStart, find_seed_traces
    from foundation.meta_schedule.warm.seed_round import SeedRoundReport, transplanted_seeds
    from foundation.meta_schedule.warm.transplant import Transplanter
    from foundation.models.zoo import load_zoo_model
    from foundation.registry.reported_records import canonical_json, plain_value

    from support.tvm_records import matmul_module, tuning_record

    url, fingerprint = donors
    store = RegistryStore(url, create=False)
    try:
        target_json = store.list_jobs()[0].target
        import tvm

        target = tvm.target.Target(json.loads(target_json))
        tasks = extract_tuning_tasks(load_zoo_model("mlp-tiny", 2), target)
        found = find_seed_traces(store, fingerprint, target_json, tvm.__version__, tasks, 2)
        assert all(found), found
        # A matmul without the bias and activation: another structure, whose trace's
        # instructions match no design space of these tasks; and a trace that is not one.
        from tvm.s_tir.meta_schedule.database import Workload

        workload = Workload(matmul_module(64))
        record = plain_value(tuning_record(workload, 8, [1e-6]).as_json())
        other = SeedTrace(canonical_json(plain_value(workload.as_json())), canonical_json(record[0]),
                          fingerprint, True, 1e-6)
        garbage = SeedTrace(found[0][0].workload_json, '[["not", "a", "trace"]]', fingerprint, True, 1e-6)
        seeds = [[other, garbage, *task_seeds] for task_seeds in found]
        # The donor's own seeds transplant as the box's search left them: a schedule tuned at
        # batch 4 may not fit batch 2 (a Zen 5's, 2026-11-28); those are rejected too.
        alone = SeedRoundReport()
        valid = sum(len(transplanted_seeds(Transplanter(target), task.mod, task_seeds, 2, alone))
                    for task, task_seeds in zip(tasks, found))
        assert valid >= len(tasks), (valid, alone)  # every task has a seed of its own to measure
        database = tvm_database_for(store, fingerprint, target_json, tvm.__version__, {})
        with WorkerPools() as pools:
            # 8 trials a task: seeds take at most a quarter of a task's plan, here the two offered.
            report = tune(tasks, target, database, TuningBudget(16, 8, 4), tmp_path / "work", pools=pools,
                          warm=WarmStart(seeds=seeds, max_seeds_per_task=2))
    finally:
        store.dispose()
    assert report.seeds.rejected == 2 * len(tasks) + alone.rejected, report.seeds
    # Each task's best seed is measured; its second too, unless the best lost to the task's
    # untuned form (then it is held back and its trial searched).
    assert report.seeds.per_task and min(report.seeds.per_task) >= 1, report.seeds
    assert report.seeds.own_fingerprint + report.seeds.held_back == valid, report.seeds
    assert report.trials == 16 and all(t.best_sec is not None for t in report.tasks), report.tasks


def test_another_fingerprints_records_seed_the_search_but_are_never_hits_or_build_answers(donors):
    from foundation.compile import extract_tuning_tasks
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.zoo import load_zoo_model

    url, fingerprint = donors
    # The same model, tuned on another box (records moved to its fingerprint), no artifact here.
    engine = create_engine(url)
    with engine.begin() as connection:
        details = json.loads(connection.execute(text("SELECT details FROM fingerprints")).scalar_one())
        elsewhere = {**details, "features": [f for f in details.get("features", []) if f != "avx2"], "cores": 64}
        connection.execute(text("INSERT INTO fingerprints (id, kind, summary, details, created_at) "
                                "VALUES (:id, 'cpu', 'another box', :details, CURRENT_TIMESTAMP)"),
                           {"id": ELSEWHERE, "details": json.dumps(elsewhere)})
        connection.execute(text("UPDATE tuning_records SET fingerprint_id = :fp"), {"fp": ELSEWHERE})
        connection.execute(text("UPDATE jobs SET artifact_id = NULL"))
        connection.execute(text("DELETE FROM artifacts"))
        foreign = connection.execute(text("SELECT count(*) FROM tuning_records")).scalar_one()
    engine.dispose()

    store = RegistryStore(url, create=False)
    try:
        import tvm

        target_json = store.list_jobs()[0].target
        target = tvm.target.Target(json.loads(target_json))
        database = tvm_database_for(store, fingerprint, target_json, tvm.__version__, {})
        for task in extract_tuning_tasks(load_zoo_model("mlp-tiny", 4), target):
            # What a build would look up: nothing, though another fingerprint has this very workload.
            assert database.query_tuning_record(task.mod, target, "main") is None
            assert database.get_top_k(database.commit_workload(task.mod), 5) == []
    finally:
        store.dispose()

    result = submit(_request(url, 4))
    assert result.job.state == "succeeded" and not result.cache_hit, result.job
    warm = result.to_json()["warm_start"]
    assert warm["seeds_other_fingerprints"] >= 2 and warm["seeds_own_fingerprint"] == 0, warm
    # The seeds were measured here: they are this fingerprint's records; the other box's are untouched.
    store = RegistryStore(url, create=False)
    try:
        records = store.records.all_records()
    finally:
        store.dispose()
    assert sum(r.fingerprint_id == ELSEWHERE for r in records) == foreign
    assert all(r.fingerprint_id == fingerprint for r in records if r.job_id == result.job.id)
    assert 0 < sum(r.job_id == result.job.id for r in records) <= result.report.trials
