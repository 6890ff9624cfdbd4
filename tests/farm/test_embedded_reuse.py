"""Exact-workload reuse with real tuning: a second model sharing workloads with a tuned one tunes only its new tasks."""

from __future__ import annotations

import pytest

from farm.embedded import submit
from farm.registry_jobs import RegistryJobs
from farm.submit_values import SubmitRequest
from foundation.meta_schedule.measure import MeasureSettings
from foundation.registry import RegistryStore

from support.onnx_models import write_small_cnn, write_small_cnn_other_head

pytestmark = pytest.mark.slow


def _shared_and_new(first, second):
    """Task names of ``second`` whose workload is one of ``first``'s, and the others (by TVM alone)."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm
    import tvm_ffi

    from foundation.compile import extract_tuning_tasks
    from foundation.models.loading import load_model

    target = tvm.target.Target("llvm")
    tuned = extract_tuning_tasks(load_model(str(first), 1), target)
    shared, new = set(), set()
    for task in extract_tuning_tasks(load_model(str(second), 1), target):
        (shared if any(tvm_ffi.structural_equal(task.mod, t.mod) for t in tuned) else new).add(task.name)
    return shared, new


def test_a_model_sharing_workloads_with_a_tuned_one_tunes_only_its_new_tasks(tmp_path):
    # SQLite only: the record counts behind the decision are tested on both databases in
    # tests/foundation/registry, and this test tunes for real.
    registry = f"sqlite:///{tmp_path / 'r.db'}"
    first, second = write_small_cnn(tmp_path / "a.onnx"), write_small_cnn_other_head(tmp_path / "b.onnx")
    shared, new = _shared_and_new(first, second)
    assert shared and new  # the two models overlap, and only in part

    def tune(model, reuse=None):
        # Plain weights: the overlap above is of the plain tasks.
        return submit(SubmitRequest(model=str(model), target="llvm", batch=1, registry=registry, trials_per_task=2,
                                    reuse=reuse, weights_layout="plain", measure=MeasureSettings(min_repeat_ms=5),
                                    validation_runs=2))

    cold = tune(first)
    assert cold.job.state == "succeeded", cold.job.error
    assert cold.reuse.reused == 0 and cold.job.options["reused"]["trials_saved"] == 0
    assert cold.job.options["reuse"] == "auto"  # the default

    warm = tune(second, reuse="full")
    assert warm.job.state == "succeeded", warm.job.error  # built with the first model's records, and validated
    assert {t.name for t in warm.report.tasks} == new
    skipped = {t.name for t in warm.reuse.tasks if t.action.value == "skip"}
    assert skipped == shared and all(t.measured > 0 for t in warm.reuse.tasks if t.name in shared)
    assert warm.reuse.trials == 2 * len(new) and warm.reuse.trials_saved == 2 * len(shared)
    # The summary's sum of tuning's measurements covers the tasks tuned, and says the reused ones are
    # not in it (resnet-50 from a pack of resnet-18's records: 15.3 ms summed of a 35 ms library).
    from farm.cli.submit import tuning_estimate_text

    assert f"of the {len(new)} tasks it tuned ({len(shared)} reused, not counted)" in tuning_estimate_text(warm)
    assert "added up to" in tuning_estimate_text(cold) and "reused" not in tuning_estimate_text(cold)

    store = RegistryStore(registry, create=False)
    try:
        job = store.get_job(warm.job.id)
        assert job.trials_budget == 2 * len(new)
        assert job.options["reuse"] == "full"
        assert job.options["reused"] == {
            "mode": "full", "tasks": len(shared | new), "reused": len(shared), "skipped": len(shared),
            "topped_up": 0, "topup_trials": 0, "planned_trials": 2 * len(shared | new), "trials": 2 * len(new),
            "trials_saved": 2 * len(shared)}
        # The second job measured only its new workloads: none of the first job's.
        first_workloads = {w for w, _ in store.records.job_measurements(cold.job.id)}
        second_workloads = {w for w, _ in store.records.job_measurements(warm.job.id)}
        assert second_workloads and not second_workloads & first_workloads
        assert RegistryJobs(store).document(job)["reuse"] == job.options["reused"]
    finally:
        store.dispose()
    assert warm.to_json()["reuse"]["skipped"] == len(shared)

    # A retune reuses nothing unless asked (its default is off); asked for top-ups, every task gets one.
    again = submit(SubmitRequest(model=str(second), target="llvm", batch=1, registry=registry, trials_per_task=2,
                                 retune=True, reuse="topup", weights_layout="plain",
                                 measure=MeasureSettings(min_repeat_ms=5), validation_runs=2))
    assert again.job.state == "succeeded", again.job.error
    assert again.reuse.topped_up == len(shared | new) and again.reuse.trials == 2 * len(shared | new)
    # A task whose design space has fewer new candidates than its top-up ends early.
    assert 0 < again.report.trials <= again.reuse.trials
    assert all(t.trials <= t.budget == 2 for t in again.report.tasks)
