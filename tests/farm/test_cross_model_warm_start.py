"""A job on a fingerprint the registry has no records of starts from the cost model trained on
other fingerprints' records (the cross-hardware model), says so in its notes, and the search asks
it; after jobs the cross model is retrained only once the records arrived are a share of its samples.

The other fingerprints' records are synthetic (tests/support/cross_records.py: real schedules of
small matmuls, made-up boxes and times); the job is real: mlp-tiny tuned with MetaSchedule here.
How well the model transfers is bench/cost_model_transfer.py's figure, never asserted here.
"""

from __future__ import annotations

import re

import pytest

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.domain.job_spec import job_notes
from foundation.domain.warm_start_use import describe, job_warm_start
from foundation.registry import RegistryStore

from support.cross_records import BOXES, synthetic_registry

pytestmark = pytest.mark.slow


@pytest.fixture
def others_registry(tmp_path):
    """A registry holding only three other boxes' records, and no cost model yet."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm

    url = f"sqlite:///{tmp_path / 'registry.db'}"
    synthetic_registry(url, tvm.target.Target({"kind": "llvm", "num-cores": 2}), per_workload=30).dispose()
    return url


def _request(url: str, **options) -> SubmitRequest:
    return SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=url, trials_per_task=4,
                         validation_runs=2, weights_layout="plain", **options)


def _cross(store: RegistryStore, version: str):
    [cross] = store.cost_models.of_kind(version, "xgb-cross")
    return cross


def test_a_new_fingerprint_starts_from_the_cross_model_which_learns_once_enough_records_arrive(others_registry):
    from foundation.hardware.versions import tvm_version
    from foundation.meta_schedule.warm.cross_model import NEW_SHARE
    from foundation.meta_schedule.warm.job_start import learn_from_job

    url, version = others_registry, tvm_version()
    result = submit(_request(url))
    assert result.job.state == "succeeded", result.job
    assert result.fingerprint not in {fp for fp, _ in BOXES}
    # The search started from the cross model: the submit's summary says so...
    warm = result.to_json()["warm_start"]
    assert warm["pretrained_cost_model"] is True, warm
    assert warm["cost_model_start"].startswith("the cross-hardware cost model (sha256 "), warm
    store = RegistryStore(url, create=False)
    try:
        # ... and the job's notes, which `farm status` reads: which model, and that the search asked it.
        kept = job_warm_start(job_notes(store.get_job(result.job.id)).warm_start_used)
        assert kept["cost_model_kind"] == "xgb-cross" and kept["pretrained_cost_model"], kept
        ranked = re.search(r"it ranked (\d+) batches", kept["cost_model_note"])
        assert ranked and int(ranked.group(1)) >= 1, kept
        assert "cost model cross-hardware, trained on every fingerprint's records" in describe(kept)
        # Trained when the job started (the registry had none), on the other boxes' records; not
        # retrained after it: the job's records are fewer than a fifth of its samples.
        after = _cross(store, version)
        mine = [r for r in store.records.all_records(fingerprint_id=result.fingerprint) if r.job_id == result.job.id]
        assert 0 < len(mine) < NEW_SHARE * after.samples, (len(mine), after)
        assert after.sha256 == kept["cost_model_sha256"] and after.samples == 3 * 2 * 30, after
        assert after.last_record_id < store.cost_models.newest_record_id(version, "cpu")
    finally:
        store.dispose()

    # A second job that measures nothing new (every task already measured: reused whole) ends
    # without retraining it.
    second = submit(_request(url, retune=True, reuse="full"))
    assert second.job.state == "succeeded" and second.to_json()["trials"] == 0, second.job
    store = RegistryStore(url, create=False)
    try:
        again = _cross(store, version)
        assert (again.sha256, again.updated_at) == (after.sha256, after.updated_at)
        told = []
        import tvm

        learn_from_job(store, result.fingerprint, tvm.target.Target({"kind": "llvm"}), version,
                       lambda state, detail: told.append(detail))
        assert any(d.startswith("cross-hardware cost model of cpu: unchanged") for d in told), told
    finally:
        store.dispose()
