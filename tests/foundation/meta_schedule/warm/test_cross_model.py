"""The cost model trained across fingerprints: trained on every box's records with their device
features, stored in the registry as xgb-cross, driving a MetaSchedule search on a box it has no
records of.

The registry is synthetic (tests/support/cross_records.py): real schedules, made-up boxes and
times. It proves the plumbing; how well the model transfers is bench/cost_model_transfer.py's
figure on real records, never asserted here.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from support.cross_records import BOXES, random_schedules, synthetic_registry
from support.tvm_records import matmul_module

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, target):
    store = synthetic_registry(f"sqlite:///{tmp_path_factory.mktemp('cross') / 'registry.db'}", target)
    yield store
    store.dispose()


def _candidates(mod, target, count):
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

    return [MeasureCandidate(s, ArgInfo.from_entry_func(s.mod, remove_preproc=True))
            for s in random_schedules(mod, target, count)]


def test_the_cross_model_learns_every_fingerprint_and_is_stored_as_xgb_cross(synthetic, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from foundation.hardware.device_features import VECTOR_FIELDS, device_vector
    from foundation.meta_schedule.warm.cross_model import KIND, load_cross_model, refresh_cross_model
    from foundation.meta_schedule.warm.cross_samples import program_features

    version = tvm.__version__
    stored = refresh_cross_model(synthetic, version)
    records = sum(len(synthetic.records.all_records(fingerprint_id=fp)) for fp, _ in BOXES)
    assert stored is not None and stored.kind == KIND and stored.samples == records == 3 * 2 * 30
    assert stored.workloads == 6  # (workload, fingerprint) groups: labels are normalised within each
    assert stored.fingerprint_id in {fp for fp, _ in BOXES}
    # The per-fingerprint model of the row it sits under is another kind: neither replaces the other.
    assert synthetic.cost_models.find(stored.fingerprint_id, version, "xgb") is None
    model, again = load_cross_model(synthetic, version)
    assert again == stored and model.device_fields == VECTOR_FIELDS
    assert load_cross_model(synthetic, version, "cuda") is None
    # Nothing stored since: it is not retrained.
    assert refresh_cross_model(synthetic, version) == stored

    # On a workload no box measured, each box's device features give it its own prediction.
    mod = matmul_module(40)
    programs = program_features(ms.TuneContext(mod=mod, target=target, task_name="t"),
                                _candidates(mod, target, 12))
    by_box = {fp: model.predict(programs, device_vector({"device": device})) for fp, device in BOXES}
    assert all(np.isfinite(scores).all() and len(scores) == 12 for scores in by_box.values())
    assert not np.array_equal(by_box[BOXES[0][0]], by_box[BOXES[1][0]])
    # A box with no device features at all still gets scores (missing values, not an error).
    assert np.isfinite(model.predict(programs, [math.nan] * len(VECTOR_FIELDS))).all()


def test_the_cross_cost_model_drives_a_search_and_blends_in_the_jobs_own_measurements(synthetic, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from foundation.hardware.device_features import device_vector
    from foundation.meta_schedule.warm.cross_cost_model import CrossCostModel
    from foundation.meta_schedule.warm.cross_cost_model import blended as blend
    from foundation.meta_schedule.warm.cross_model import load_cross_model, refresh_cross_model
    from foundation.meta_schedule.warm.cross_samples import program_features

    from support.cross_records import synthetic_seconds

    refresh_cross_model(synthetic, tvm.__version__)
    cross, _stored = load_cross_model(synthetic, tvm.__version__)
    new_box = {"cores": 2, "vector_bits": 256, "fma": 1, "peak_gflops": 90.0, "copy_gbps": 15.0}
    model = CrossCostModel(cross, device_vector({"device": new_box}))
    mod = matmul_module(40)

    # MetaSchedule's evolutionary search asks it for scores through TVM's FFI, from the first batch.
    context = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="evolutionary", task_name="cross", rand_state=1)
    context.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=model)
    picked = context.generate_measure_candidates()
    assert picked and len(picked) <= 8
    context.post_tuning()

    candidates = _candidates(mod, target, 120)
    alone = model.predict(context, candidates)
    np.testing.assert_array_equal(alone, cross.predict(program_features(context, candidates), model.vector))
    # The job's own measurements train its own model; once it has a booster they weigh in.
    programs = program_features(context, candidates)
    misses, hits = model.features.misses, model.features.hits
    model.update(context, candidates,
                 [RunnerResult(run_secs=[synthetic_seconds(p, new_box)], error_msg=None) for p in programs])
    assert 0 < model.own_weight() < 1
    # The update read the candidates' features from the cache the search's scoring filled, the same
    # features PerStoreFeature extracts.
    assert (model.features.misses, model.features.hits) == (misses, hits + 120)
    learned = [f for group in model.own.data.values() for f in group.features]
    assert len(learned) == 120
    for kept, extracted in zip(learned, programs):
        np.testing.assert_array_equal(kept, extracted)
    misses, hits = model.features.misses, model.features.hits
    blended = model.predict(context, candidates)
    # The second batch of the same candidates: their features were kept from the first, none extracted again.
    assert (model.features.misses, model.features.hits) == (misses, hits + 120)
    assert len(blended) == 120 and ((0 <= blended) & (blended <= 1)).all()
    # The features extracted once serve both models: the own model's part is what it predicts itself.
    np.testing.assert_allclose(blended, blend(alone, model.own.predict(context, candidates), model.own.data_size))
    assert not np.array_equal(np.argsort(blended), np.argsort(alone))


def test_a_stored_model_of_other_device_columns_is_not_read_and_the_next_refresh_replaces_it(
        tmp_path, target, caplog, monkeypatch):
    import tvm

    from foundation.meta_schedule.warm import cross_model
    from foundation.meta_schedule.warm.cross_model import (
        DEVICE_FIELDS,
        KIND,
        load_cross_model,
        model_bytes,
        refresh_cross_model,
        train,
    )
    from foundation.meta_schedule.warm.cross_samples import registry_dataset
    from foundation.meta_schedule.warm.program_on_device import COLUMNS

    version = tvm.__version__
    store = synthetic_registry(f"sqlite:///{tmp_path / 'registry.db'}", target, sizes=(32,), per_workload=20)
    try:
        dataset = registry_dataset([store], version)
        # Its columns were each row read against its box: read as today's columns, every row would be misread.
        before = train(dataset.samples, dataset.vectors, device_fields=COLUMNS)
        holder = BOXES[0][0]
        store.cost_models.save(holder, version, KIND, model_bytes(before), last_record_id=0,
                               samples=len(dataset.samples), workloads=3)
        monkeypatch.setattr(cross_model, "_UNREADABLE_SAID", set(), raising=False)  # said before of an equal model?
        with caplog.at_level(logging.WARNING, logger=cross_model.__name__):
            assert load_cross_model(store, version) is None
            assert load_cross_model(store, version) is None
        said = [r for r in caplog.records if "not using the cross cost model" in r.getMessage()]
        assert len(said) == 1, said  # once per stored model, not at every read a job makes
        stored = refresh_cross_model(store, version)
        assert stored is not None and stored.fingerprint_id == holder
        assert load_cross_model(store, version)[0].device_fields == DEVICE_FIELDS
    finally:
        store.dispose()


def test_a_job_on_a_new_box_trains_the_cross_model_first_where_the_stored_one_cannot_be_read(tmp_path, target):
    """Shipped packs of an older farm carry a cross model of other device columns: a job on a box with no
    records of its own starts from a cross model trained then, not from nothing."""
    import tvm

    from foundation.meta_schedule.warm.cross_cost_model import CrossCostModel
    from foundation.meta_schedule.warm.cross_model import DEVICE_FIELDS, KIND, load_cross_model, model_bytes, train
    from foundation.meta_schedule.warm.cross_samples import registry_dataset
    from foundation.meta_schedule.warm.job_start import warm_start_for
    from foundation.meta_schedule.warm.program_on_device import COLUMNS

    version = tvm.__version__
    store = synthetic_registry(f"sqlite:///{tmp_path / 'registry.db'}", target, sizes=(32,), per_workload=40)
    try:
        dataset = registry_dataset([store], version)
        old = train(dataset.samples, dataset.vectors, device_fields=COLUMNS)
        store.cost_models.save(BOXES[0][0], version, KIND, model_bytes(old), last_record_id=0,
                               samples=len(dataset.samples), workloads=3)
        new_box = BOXES[-1][0]
        warm = warm_start_for(store, new_box, version, seeds=[], max_seeds_per_task=0)
        assert isinstance(warm.cost_model, CrossCostModel)
        model, stored = load_cross_model(store, version)
        assert model.device_fields == DEVICE_FIELDS and warm.cost_model_sha256 == stored.sha256
    finally:
        store.dispose()


def test_a_batch_packed_once_scores_each_program_as_metaschedules_packsum_does(synthetic, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum

    from foundation.hardware.device_features import device_vector
    from foundation.meta_schedule.warm.cross_model import PackedPrograms, load_cross_model, refresh_cross_model
    from foundation.meta_schedule.warm.cross_samples import program_features

    refresh_cross_model(synthetic, tvm.__version__)
    cross, _stored = load_cross_model(synthetic, tvm.__version__)
    mod = matmul_module(40)
    programs = program_features(ms.TuneContext(mod=mod, target=target, task_name="t"), _candidates(mod, target, 20))
    vector = device_vector({"device": BOXES[0][1]})
    with_empty = [*programs[:5], programs[0][:0], *programs[5:]]  # a program with no store rows scores 0
    rows = [cross.rows(p, vector) for p in programs]
    packsum = PackSum(xs=rows, ys=None)
    expected = packsum.predict_with_score(cross.booster.predict(packsum.dmatrix))
    scores = cross.predict(with_empty, vector)
    assert scores[5] == 0.0 and len(scores) == 21
    np.testing.assert_allclose(np.delete(scores, 5), expected, rtol=1e-6)
    packed = PackedPrograms.of(with_empty)
    assert packed.rows.shape == (sum(len(p) for p in programs), programs[0].shape[1]) and packed.count == 21


def test_a_box_with_few_records_of_its_own_starts_from_the_cross_model(synthetic):
    import tvm

    from foundation.hardware.device_features import VECTOR_FIELDS
    from foundation.hardware.fingerprint import fingerprint_from_details
    from foundation.meta_schedule.warm.cross_cost_model import FEW_SAMPLES, CrossCostModel, cross_cost_model_for
    from foundation.meta_schedule.warm.cross_model import refresh_cross_model

    version = tvm.__version__
    refresh_cross_model(synthetic, version)
    details = {"arch": "x86_64", "vendor": "AuthenticAMD", "model": "AMD EPYC", "features": ["avx2", "fma"],
               "cores": 2, "llvm_mcpu": "znver4", "llvm_triple": "x86_64-unknown-linux-gnu",
               "device": {"peak_gflops": 90.0, "copy_gbps": 15.0}}
    new_box = fingerprint_from_details("cpu", details)
    synthetic.upsert_fingerprint(new_box.id, "cpu", new_box.summary, new_box.details)
    model = cross_cost_model_for(synthetic, new_box, version)
    assert isinstance(model, CrossCostModel) and model.own_weight() == 0.0
    fields = dict(zip(VECTOR_FIELDS, model.vector))
    assert (fields["peak_gflops"], fields["copy_gbps"]) == (90.0, 15.0)  # this box's own
    # Once its own model has learned enough of its records, the box starts from that instead.
    synthetic.cost_models.save(new_box.id, version, "xgb", b"its own model", last_record_id=0,
                               samples=FEW_SAMPLES, workloads=1)
    assert cross_cost_model_for(synthetic, new_box, version) is None
    assert cross_cost_model_for(synthetic, fingerprint_from_details("cuda", {
        "name": "Tesla T4", "compute_capability": "7.5", "sm_count": 40, "memory_gib": 15}), version) is None


def test_a_refresh_reads_no_record_unless_one_arrived_and_stops_at_its_time_bound(tmp_path, target, monkeypatch):
    import tvm

    from foundation.meta_schedule.warm import cross_model
    from foundation.meta_schedule.warm.cross_model import load_cross_model, refresh_cross_model

    version = tvm.__version__
    fresh = synthetic_registry(f"sqlite:///{tmp_path / 'registry.db'}", target, sizes=(32,), per_workload=20)
    try:
        # Bounded: with no time at all it makes no sample, and stores nothing.
        assert refresh_cross_model(fresh, version, seconds=0.0) is None
        assert load_cross_model(fresh, version) is None
        stored = refresh_cross_model(fresh, version)
        assert stored.samples == 3 * 20
        assert stored.last_record_id == fresh.cost_models.newest_record_id(version, "cpu") > 0

        def reads(*args, **kwargs):
            raise AssertionError("the records were read though none arrived")

        # Nothing arrived: one query says so, and no record is read.
        monkeypatch.setattr(cross_model, "registry_dataset", reads)
        assert refresh_cross_model(fresh, version) == stored
        assert fresh.cost_models.newest_record_id(version, "cuda") == 0
    finally:
        fresh.dispose()


def test_a_refresh_waits_until_the_records_arrived_are_a_share_of_what_it_learned(tmp_path, target, monkeypatch):
    import tvm

    from foundation.meta_schedule.warm import cross_model
    from foundation.meta_schedule.warm.cross_model import NEW_SHARE, refresh_cross_model

    version = tvm.__version__
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    store = synthetic_registry(url, target, sizes=(32,), per_workload=20)
    try:
        stored = refresh_cross_model(store, version)
        assert stored.samples == 3 * 20
        # 3 boxes x 3 records of a new workload: fewer than a fifth of 60 samples. Not even read.
        synthetic_registry(url, target, sizes=(40,), per_workload=3).dispose()
        assert 9 < NEW_SHARE * stored.samples <= 15
        with monkeypatch.context() as patched:
            patched.setattr(cross_model, "registry_dataset", _never_read)
            assert refresh_cross_model(store, version) == stored
        # 6 more: 15 arrived since it learned, a fifth and more. Retrained on every record.
        synthetic_registry(url, target, sizes=(48,), per_workload=2).dispose()
        again = refresh_cross_model(store, version)
        assert again.sha256 != stored.sha256 and again.samples == 60 + 9 + 6, again
        assert again.last_record_id == store.cost_models.newest_record_id(version, "cpu")
    finally:
        store.dispose()


def _never_read(*args, **kwargs):
    raise AssertionError("the records were read though too few arrived to retrain on")


def test_fine_tuning_keeps_the_cross_trees_and_grows_a_few_on_the_boxs_own_records(synthetic, target):
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from foundation.hardware.device_features import device_vector
    from foundation.meta_schedule.warm.cross_cost_model import FINE_TUNE, CrossCostModel
    from foundation.meta_schedule.warm.cross_model import (
        FINE_TUNE_ROUNDS,
        fine_tuned,
        load_cross_model,
        refresh_cross_model,
    )
    from foundation.meta_schedule.warm.cross_samples import CrossSample, program_features

    from support.cross_records import synthetic_seconds

    refresh_cross_model(synthetic, tvm.__version__)
    cross, _stored = load_cross_model(synthetic, tvm.__version__)
    new_box = {"cores": 2, "vector_bits": 256, "fma": 1, "peak_gflops": 90.0, "copy_gbps": 15.0}
    vector = device_vector({"device": new_box})
    mod = matmul_module(40)
    context = ms.TuneContext(mod=mod, target=target, task_name="t")
    candidates = _candidates(mod, target, 40)
    programs = program_features(context, candidates)
    own = [CrossSample("cpu-new", 1, str(i), p, synthetic_seconds(p, new_box)) for i, p in enumerate(programs[:20])]
    tuned = fine_tuned(cross, own, {"cpu-new": vector})
    grown = tuned.booster.num_boosted_rounds() - cross.booster.num_boosted_rounds()
    assert 0 < grown <= FINE_TUNE_ROUNDS
    assert cross.booster.num_boosted_rounds() == load_cross_model(synthetic, tvm.__version__)[0].booster \
        .num_boosted_rounds()  # the cross model itself is left as it was
    assert not np.array_equal(tuned.predict(programs, vector), cross.predict(programs, vector))

    # In a job (FINE_TUNE): each measured batch refits the new trees on every own sample, and the
    # fine-tuned model alone ranks.
    model = CrossCostModel(cross, vector, mode=FINE_TUNE)
    model.update(context, candidates[:20],
                 [RunnerResult(run_secs=[synthetic_seconds(p, new_box)], error_msg=None) for p in programs[:20]])
    assert model.ranking is not cross and model.own_weight() == 0.0
    np.testing.assert_array_equal(model.predict(context, candidates),
                                  model.ranking.predict(programs, vector))
    assert model.batches_ranked == 1


def test_a_shard_names_the_cross_model_until_the_fingerprints_own_has_learned_more(synthetic):
    import tvm

    from foundation.meta_schedule.warm.cross_model import FEW_SAMPLES, cross_model_ref, refresh_cross_model

    version = tvm.__version__
    cross = refresh_cross_model(synthetic, version)
    assert cross_model_ref(synthetic, "cpu-newbox00001", version) == cross
    assert cross_model_ref(synthetic, "cuda-newbox0001", version) is None
    holder = "cpu-newbox00002"
    synthetic.upsert_fingerprint(holder, "cpu", "a box of its own", {})
    few = synthetic.cost_models.save(holder, version, "xgb", b"own", last_record_id=0, samples=cross.samples - 1,
                                     workloads=1)
    assert cross_model_ref(synthetic, holder, version) == cross
    # Trained on as many records as the cross model (this fingerprint's alone): its own is the start.
    same = synthetic.cost_models.save(holder, version, "xgb", b"own2", last_record_id=0, samples=cross.samples,
                                      workloads=1)
    assert cross_model_ref(synthetic, holder, version) == same != few
    many = synthetic.cost_models.save(holder, version, "xgb", b"own3", last_record_id=0,
                                      samples=max(FEW_SAMPLES, cross.samples + 1), workloads=1)
    assert cross_model_ref(synthetic, holder, version) == many
