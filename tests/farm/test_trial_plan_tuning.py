"""The trial plan, enforced in real tuning: a small global budget reaches every task that matters,
and no task gets more than its plan (counted from the registry's records per workload)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation import config
from foundation.meta_schedule.measure import MeasureSettings
from foundation.registry.store import RegistryStore

pytestmark = pytest.mark.slow


def test_a_small_budget_measures_every_task_that_matters_and_no_task_exceeds_its_plan(tmp_path):
    # MetaSchedule's own round robin measured 4 of resnet-tiny's 12 tasks with 64 trials,
    # the first 16 going to adaptive_avg_pool2d.
    url = f"sqlite:///{tmp_path / 'r.db'}"
    request = SubmitRequest(model="resnet-tiny", target="llvm", batch=1, registry=url, trials=64,
                            measure=MeasureSettings(min_repeat_ms=5), validation_runs=1)
    result = submit(request)
    assert result.job.state == "succeeded", result.job.error
    plan = result.plan
    assert plan is not None and plan.total <= 64
    assert result.job.options["trial_plan"] == plan.to_json()  # what `farm status` and `farm report` show
    assert result.job.trials_budget == plan.total

    tasks = json.loads((config.job_work_dir(result.job.id) / "tasks.json").read_text())
    assert [t["name"] for t in tasks] == [t.name for t in plan.tasks]
    store = RegistryStore(url)
    shash_of = {workload_id: shash
                for workload_id, (shash, _) in store.records.get_workloads(
                    {w for w, _ in store.records.job_measurements(result.job.id)}).items()}
    records = Counter(shash_of[w] for w, _ in store.records.job_measurements(result.job.id))
    measured = {t["name"]: records[t["workload_shash"]] for t in tasks}

    for line in plan.tasks:
        assert measured[line.name] <= line.trials, (line, measured)
        if not line.minor:
            assert measured[line.name] > 0, f"{line.name} ({line.share:.1%} of the model) got no trials: {measured}"
    largest = max(plan.tasks, key=lambda t: t.share)
    assert measured[largest.name] == max(measured.values())
    minor = [t for t in plan.tasks if t.minor]
    # Tuned in the CPU's default form (prepacked weights, blocked activations): TVM numbers the
    # renamed tasks, and the blocks go back to NCHW after the pool, before the classifier.
    assert {t.name for t in minor} >= {"te_layout_transform1", "adaptive_avg_pool2d1"}
    assert sum(measured[t.name] for t in minor) <= 0.1 * 64
    assert sum(measured.values()) == result.report.trials
    # Each task's progress counted to its plan, not to the budget.
    assert [t.planned for t in result.report.tasks] == plan.trials


def test_a_two_phase_job_notes_what_each_phase_gave(tmp_path, monkeypatch):
    """FARM_PHASED_PLAN=1: the job tunes its first phase by FLOPs, then the rest by each task's loss against
    its ceiling at the fingerprint's peak; the job's plan says what each phase gave, and the registry holds
    as many records of each task as the two phases planned."""
    monkeypatch.setenv(config.PHASED_PLAN_ENV, "1")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    request = SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=url, trials=24,
                            measure=MeasureSettings(min_repeat_ms=5), validation_runs=1)
    result = submit(request)
    assert result.job.state == "succeeded", result.job.error
    plan = result.plan
    assert plan is not None and len(plan.phases) == 2 and plan.total <= 24
    assert all(len(line.phases) == 2 and line.trials == sum(line.phases) for line in plan.tasks)
    assert all(line.loss_ms is not None for line in plan.tasks)
    assert plan.peak_gflops is not None and plan.peak_gflops > 0  # the fingerprint's measured peak
    assert RegistryStore(url).get_job(result.job.id).options["trial_plan"] == plan.to_json()
    assert [t.trials for t in result.report.tasks] == plan.trials == [t.planned for t in result.report.tasks]
    assert result.report.trials == plan.total == result.job.trials_done
