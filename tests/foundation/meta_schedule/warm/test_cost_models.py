"""The fingerprint's cost model: trained on its measured records, stored without pickle, used by
a tune from its first batch and still learning.

Here a model trained on some schedules of a workload must order held-out schedules of the same
workload better than an untrained one. How well it ranks records of another shape is measured by
bench/cost_model_ranking.py, not asserted: at the few hundred records a test can afford it finds
the fastest records of another shape no better than a random order (docs/benchmarks.md).
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from foundation.registry import RegistryStore

from support.quiet_box import cpu_elsewhere, quiet_box
from support.tvm_records import matmul_module

pytestmark = [pytest.mark.slow, pytest.mark.quiet_box]

FINGERPRINT = "cpu-costmodel0001"
UNTRAINED_DRAWS = 10


def _random_schedules(mod, target, count: int):
    """``count`` distinct random points of ``mod``'s design space, post-processed, as the search samples them."""
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Trace

    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name="sample")
    spaces = context.generate_design_space()
    out, seen = [], set()
    for seed in range(1, 50 * count):
        schedule = Schedule(mod, seed=seed)
        # Without the space's own decisions, every sampling instruction samples anew.
        Trace(spaces[seed % len(spaces)].trace.insts, {}).apply_to_schedule(schedule, remove_postproc=True)
        schedule.enter_postproc()
        if not all(p.apply(schedule) for p in context.space_generator.postprocs):
            continue
        key = int(tvm_ffi.structural_hash(schedule.mod))
        if key not in seen:
            seen.add(key)
            out.append(schedule)
        if len(out) == count:
            break
    return out


def _candidates(schedules) -> list:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    return [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules]


def _scores(model, mod, target, candidates) -> list[float]:
    """What ``model`` predicts for ``candidates`` of ``mod`` (higher: faster)."""
    from tvm.s_tir import meta_schedule as ms

    return list(model.predict(ms.TuneContext(mod=mod, target=target, task_name="score"), candidates))


def _build(mod, target, schedules, pools) -> list:
    """Build ``schedules`` with the farm's builder pool; (schedule, its arguments, artifact path) of each that built."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    builder, _runner = pools.get("llvm")
    built = builder.build([BuilderInput(s.mod, target) for s in schedules])
    return [(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True), b.artifact_path)
            for s, b in zip(schedules, built) if b.error_msg is None]


def _fastest_repeats(built, pools) -> list[float | None]:
    """Run what ``_build`` built with the farm's runner pool: each schedule's fastest repeat in
    seconds (None where it failed). A stray pause on the box lengthens repeats, never shortens one.
    With two processes taking a core 40% of the time beside the timing, the order of pairs agreed
    with a quiet timing's 0.88-0.90 of the time, 0.84-0.86 with the median (Zen 4)."""
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    _builder, runner = pools.get("llvm")
    futures = runner.run([RunnerInput(path, "cpu", args) for _schedule, args, path in built])
    results = [future.result() for future in futures]
    return [float(np.min([float(s) for s in r.run_secs])) if r.error_msg is None else None for r in results]


def _pairs_alike(first: list[float | None], second: list[float | None]) -> float:
    """The share of pairs of schedules two timings put in the same order."""
    times = [(a, b) for a, b in zip(first, second) if a is not None and b is not None]
    alike = pairs = 0
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            pairs += 1
            alike += (times[i][0] < times[j][0]) == (times[i][1] < times[j][1])
    return alike / pairs if pairs else 0.0


def _measure_into(database, mod, target, built, pools) -> float:
    """Time what ``_build`` built twice, the second time in the reverse order, and commit each
    schedule as MetaSchedule would, with the fastest repeat of both as its one time; returns the
    share of pairs the two timings ordered alike. A VM whose speed sags for seconds (these move by a
    third between minutes) slows the schedules timed then, and reorders them against the rest:
    quiet within the box (0.26 s taken elsewhere), one timing's model ranked 0.58 in CI
    (2026-12-05), against 0.68 alone. In reverse order, a schedule's two timings lie apart by up to
    the whole pass, and a sag slows both only where it lasts that long."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    first = _fastest_repeats(built, pools)
    second = _fastest_repeats(built[::-1], pools)[::-1]
    workload = database.commit_workload(mod)
    for (schedule, args, _path), one, other in zip(built, first, second):
        times = [t for t in (one, other) if t is not None]
        run_secs = [min(times)] if times else [1e10]
        database.commit_tuning_record(TuningRecord(schedule.trace, workload, run_secs, target, args))
    database.flush()
    return _pairs_alike(first, second)


def _copy_without_cost_models(url: str, tmp_path) -> RegistryStore:
    """A copy of the SQLite registry at ``url`` with no cost model stored: as a registry whose
    records no job has learned from yet."""
    import shutil
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    copy = tmp_path / "registry.db"
    shutil.copy(url.removeprefix("sqlite:///"), copy)
    with sqlite3.connect(copy) as connection:
        connection.execute("DELETE FROM cost_models")
    return RegistryStore(f"sqlite:///{copy}", create=False)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, target, box_locks):
    """A registry with 360 measured random schedules of a 96^3 matmul: three folds of 240 to
    train on and 120 held out, enough for a model to rank them steadily (120 to train on ranked
    0.61-0.69, and failed the bar once, in CI on 2026-11-29)."""
    import tvm

    from foundation.meta_schedule.database.registry_database import canonical_target_json, tvm_database_for
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools

    url = f"sqlite:///{tmp_path_factory.mktemp('cost') / 'registry.db'}"
    store = RegistryStore(url)
    store.upsert_fingerprint(FINGERPRINT, "cpu", "test box", {})
    target_json = canonical_target_json(target)
    database = tvm_database_for(store, FINGERPRINT, target_json, tvm.__version__, {})
    schedules = _random_schedules(matmul_module(96), target, 360)
    # Five 5 ms repeats a schedule, the fastest stored: with one 40 ms repeat, a stray pause on
    # the box (CI, 2026-11-28) reordered enough pairs to take the accuracy under the bar. Two
    # such timings of the same schedules order 95-97% of their pairs alike (Zen 5): the model, not
    # the timing, limits the accuracy. The other workers wait while these are timed (twice 21 s).
    # Timed as an agent times candidates, TVM's thread pool spinning between parallel kernels: the
    # suite stops it spinning in every process (tests/conftest.py), which added a wake-up to each
    # of these 20-100 us kernels; two timings then ordered 79% of pairs alike and the model ranked
    # 0.61-0.63, under the bar in suite runs. The workers take the environment of their start.
    with pytest.MonkeyPatch.context() as environment:
        environment.delenv("TVM_THREAD_POOL_SPIN_COUNT", raising=False)
        with WorkerPools(MeasureSettings(repeat=5, min_repeat_ms=5, cache_flush=False)) as pools:
            built = _build(matmul_module(96), target, schedules, pools)
            # Timed alone on the box (built beside other tests: a build's speed does not matter): a
            # busy box reorders the schedules (a parallel kernel waiting for a core loses more than
            # a serial one), and the held-out test ranks these measurements.
            with quiet_box(box_locks), cpu_elsewhere() as elsewhere:
                alike = _measure_into(database, matmul_module(96), target, built, pools)
    yield store, url, elsewhere, alike
    store.dispose()


def test_the_stored_model_round_trips_without_pickle_and_predicts_the_same(measured, target):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    from foundation.meta_schedule.warm.cost_models import load_cost_model, new_model, refresh_cost_model

    store, _url, _elsewhere, _alike = measured
    import tvm

    target_version = tvm.__version__
    stored = refresh_cost_model(store, FINGERPRINT, target, target_version)
    assert stored is not None and stored.samples >= 50 and stored.workloads == 1, stored
    blob = store.cost_models.blob(stored)
    np.load(io.BytesIO(blob), allow_pickle=False)  # plain arrays: nothing in it runs code when read
    model, again = load_cost_model(store, FINGERPRINT, target_version)
    assert again == stored and model.data_size == stored.samples and model.booster is not None
    mod = matmul_module(128)
    context = ms.TuneContext(mod=mod, target=target, task_name="predict")
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    candidates = [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True))
                  for s in _random_schedules(mod, target, 8)]
    first = model.predict(context, candidates)
    second = load_cost_model(store, FINGERPRINT, target_version)[0].predict(context, candidates)
    np.testing.assert_array_equal(first, second)
    # Its scores come from its booster from the first prediction on; an untrained model's are
    # random draws until it has 100 samples.
    untrained = new_model()
    assert not np.array_equal(untrained.predict(context, candidates), untrained.predict(context, candidates))
    # Nothing new stored since: a refresh leaves it as it is.
    assert refresh_cost_model(store, FINGERPRINT, target, target_version) == stored


def test_on_held_out_records_the_stored_model_ranks_better_than_an_untrained_one(measured, target, request):
    # Three folds of the measured schedules: a model trained on two, stored and loaded as a job
    # loads it, orders the third (pairs of schedules put in the right order); untrained models
    # (random scores) order the same records. A random order puts half the pairs right, give or
    # take 0.02 over the three folds (Kendall's tau of 120 records has a spread of 0.06 per fold),
    # so the untrained side is ten models' average: one draw scored 0.54 in a suite run (2026-11-29).
    import json

    from tvm.s_tir.meta_schedule.database import Workload

    from foundation.meta_schedule.warm.cost_models import learn, model_bytes, model_from_bytes, new_model
    from foundation.meta_schedule.warm.ranking_quality import ranking_quality

    store, _url, elsewhere, alike = measured
    records = [r for r in store.records.all_records(fingerprint_id=FINGERPRINT) if r.mean_sec is not None]
    workload_id = max({r.workload_id for r in records}, key=lambda w: sum(r.workload_id == w for r in records))
    records = [r for r in records if r.workload_id == workload_id]
    [(_, mod_json)] = store.records.get_workloads({workload_id}).values()
    modules = {workload_id: Workload.from_json(json.loads(mod_json)).mod}
    order = np.random.default_rng(0).permutation(len(records))
    folds = [[records[i] for i in order[k::3]] for k in range(3)]
    right = {"trained": 0.0, "untrained": 0.0}
    pairs = 0
    np.random.seed(0)  # the untrained model's scores are NumPy's uniform draws
    for k, held_out in enumerate(folds):
        model = new_model()
        learn(model, target, modules, [r for j, fold in enumerate(folds) if j != k for r in fold])
        stored = model_from_bytes(model_bytes(model))
        trained = ranking_quality(stored, target, modules, held_out)
        untrained = [ranking_quality(new_model(), target, modules, held_out) for _ in range(UNTRAINED_DRAWS)]
        assert all(u.pairs == trained.pairs for u in untrained) and trained.pairs > 0
        pairs += trained.pairs
        right["trained"] += trained.pairwise_accuracy * trained.pairs
        right["untrained"] += np.mean([u.pairwise_accuracy for u in untrained]) * trained.pairs
    accuracy = {name: count / pairs for name, count in right.items()}
    for name, value in [*accuracy.items(), ("cpu_elsewhere", elsewhere.cpu_s),
                        ("steal_s", elsewhere.steal_s), ("timings_alike", alike)]:
        request.node.user_properties.append((name, round(float(value), 3)))  # the JUnit report's, pass or fail
    # Measured on a quiet Zen 4 box: 0.67-0.70 over three folds in seven timings of the schedules
    # (0.63-0.69 with 120 records to train on, 0.55-0.60 with 40; 0.63 in a CI run). Load from
    # outside the run (the fixture keeps other tests away) drowns it: 0.55 measured beside two
    # tuning processes (load 7).
    # `elsewhere`: the CPU other processes took while the schedules were timed (a few tenths of a
    # second when the box was quiet).
    # `alike`: the share of pairs the fixture's two timings ordered alike (0.95-0.97 on a quiet Zen 5).
    assert accuracy["trained"] >= 0.6 and accuracy["trained"] - accuracy["untrained"] >= 0.1, (
        accuracy, pairs, elsewhere, alike)


def test_a_tune_starts_from_the_stored_model_and_keeps_teaching_it(measured, target, tmp_path, monkeypatch):
    import tvm

    from foundation.compile import TuningTask
    from foundation.meta_schedule import tuner
    from foundation.meta_schedule.database.registry_database import canonical_target_json, tvm_database_for
    from foundation.meta_schedule.measure import WorkerPools
    from foundation.meta_schedule.planned_search import COLD_EXPLORATION
    from foundation.meta_schedule.tuner import TuningBudget, tune
    from foundation.meta_schedule.warm import WarmStart
    from foundation.meta_schedule.warm.cost_models import load_cost_model, refresh_cost_model

    store, _url, _elsewhere, _alike = measured
    before = refresh_cost_model(store, FINGERPRINT, target, tvm.__version__)
    model, _ = load_cost_model(store, FINGERPRINT, tvm.__version__)
    as_stored, _ = load_cost_model(store, FINGERPRINT, tvm.__version__)  # the tune teaches `model`, not this copy
    database = tvm_database_for(store, FINGERPRINT, canonical_target_json(target), tvm.__version__, {})
    task = TuningTask(name="matmul64", weight=1, mod=matmul_module(64), flop=2 * 64**3)
    # A warm search draws a quarter of each batch at random (planned_search.WARM_EXPLORATION): one
    # of a batch of 4, which no model chose. At the cold share (0.05 of 4: none) every pick is the
    # model's, which is what this test checks.
    monkeypatch.setattr(tuner, "WARM_EXPLORATION", COLD_EXPLORATION)
    with WorkerPools() as pools:
        report = tune([task], target, database, TuningBudget(8, 8, 4), tmp_path / "work", pools=pools,
                      warm=WarmStart(cost_model=model))
    assert report.pretrained_cost_model and report.trials == 8
    # The stored model chose the first batch: the search measures the best-scored candidates of a
    # population it evolved by the model's scores, so the stored model rates the 4 it measured
    # first (the first records stored, flushed at the batch's end) above random points of the
    # same design space. Had the search used a model of its own (an untrained one draws random
    # scores), each pick would be a random point for the stored model: all 4 above the 75th
    # percentile of random points would happen with chance 0.25^4 = 0.4%.
    from foundation.meta_schedule.untuned_form import is_untuned_trace_json
    from foundation.meta_schedule.warm.cost_models import _samples

    # After the task's untuned form (measured first, not chosen by any model: untuned_form.py).
    first_batch = [r for r in store.records.all_records(fingerprint_id=FINGERPRINT)
                   if r.id > before.last_record_id and not is_untuned_trace_json(r.trace)][:4]
    picked = _scores(as_stored, task.mod, target, _samples(task.mod, first_batch)[0])
    sampled = _scores(as_stored, task.mod, target, _candidates(_random_schedules(task.mod, target, 64)))
    assert min(picked) > np.percentile(sampled, 75), (sorted(picked), np.percentile(sampled, [50, 75, 100]))
    # MetaSchedule updated it with every measured batch of the search (7 trials: the untuned form,
    # measured before the search, reaches the stored model through the refresh below).
    assert model.data_size == before.samples + 7
    after = refresh_cost_model(store, FINGERPRINT, target, tvm.__version__)
    assert after.samples == before.samples + 8 and after.workloads == 2
    assert store.cost_models.find(FINGERPRINT, tvm.__version__).last_record_id > before.last_record_id


def test_a_coordinator_teaches_the_fingerprints_model_what_its_agents_reported(measured, target, tmp_path):
    # The coordinator's step after a distributed job succeeds (coordinator.job_site.AgentsSite.learn)
    # is this module's refresh, run where the records are: on a registry that has no model yet.
    import threading

    import tvm

    from coordinator.cluster_store import ClusterStore
    from coordinator.hints import WorkloadJson
    from coordinator.job_site import AgentsSite
    from coordinator.model_cache import ModelCache
    from foundation.meta_schedule.database.registry_database import canonical_target_json
    from foundation.meta_schedule.warm.cost_models import MIN_SAMPLES

    _store, url, _elsewhere, _alike = measured
    fresh = _copy_without_cost_models(url, tmp_path)
    try:
        records = len(fresh.records.all_records(fingerprint_id=FINGERPRINT))
        site = AgentsSite(fresh, ClusterStore(fresh), ModelCache(tmp_path), WorkloadJson(), tvm.__version__,
                          threading.Event(), tmp_path)
        try:
            site.learn(FINGERPRINT, canonical_target_json(target))
        finally:
            site.close()
        learned = fresh.cost_models.find(FINGERPRINT, tvm.__version__)
        assert learned is not None and MIN_SAMPLES <= learned.samples <= records, (learned, records)
    finally:
        fresh.dispose()


def test_the_job_says_whether_the_model_learned_anything(measured, target, tmp_path):
    import tvm

    from foundation.meta_schedule.warm.job_start import learn_from_job

    _store, url, _elsewhere, _alike = measured
    fresh = _copy_without_cost_models(url, tmp_path)
    told: list[tuple[str, str]] = []
    try:
        learn_from_job(fresh, FINGERPRINT, target, tvm.__version__, lambda step, what: told.append((step, what)))
        learn_from_job(fresh, FINGERPRINT, target, tvm.__version__, lambda step, what: told.append((step, what)))
    finally:
        fresh.dispose()
    learned = [what for step, what in told if step == "learned"]
    # One line for the fingerprint's model and one for its hardware kind's cross model, each job.
    own = [what for what in learned if what.startswith("cost model of ")]
    cross = [what for what in learned if what.startswith("cross-hardware cost model of ")]
    assert len(learned) == 4 and len(own) == 2 and len(cross) == 2, told
    assert "samples of" in own[0] and "unchanged" in own[1], told
    assert "samples of" in cross[0] and "unchanged" in cross[1], told
