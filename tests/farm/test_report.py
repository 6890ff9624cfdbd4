"""`farm report` from a registry's rows: the model's curve starts at the first measured task, marked as
estimated until every task is measured, and the picture and page are written."""

from __future__ import annotations

import json

import pytest

from coordinator.cluster_store import ClusterStore
from farm.cli.report_cmd import write_job_report
from farm.report import ModelPoint, job_report, write_report
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.registry import NewRecord
from foundation.registry.entities import PlannedTask

from support.cluster_rows import CUDA_TARGET, GPU, T0

pytestmark = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)


def _job(store, flops: list[float]):
    """A planned job of tasks of ``flops`` (one call each): (job, its tasks' workload ids by name)."""
    store.upsert_fingerprint(GPU, "cuda", "test gpu", {})
    store.upsert_model(model_id="model-1", name="cnn", source="zoo", source_digest="v1", batch=1, inputs=[],
                       weights=[], num_parameters=1)
    cluster = ClusterStore(store)
    job, _ = cluster.jobs.create_job(model_id="model-1", target_request="cuda", target_kind="cuda", target=CUDA_TARGET,
                                     fingerprint_id=GPU, trials_budget=8 * len(flops), options={}, now=T0)
    tasks = [PlannedTask(f"task{i}", weight=1, flop=f, workload_shash=str(1000 + i), mod_json=f'["{1000 + i}"]',
                         trials_budget=8) for i, f in enumerate(flops)]
    cluster.plans.add_job_plan(job.id, tasks, split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop) for t in tasks],
                                                          1, 8 * len(flops)), T0)
    return job, {t.name: t.workload_id for t in cluster.plans.job_tasks(job.id)}


def _measure(store, job, workload_id: int, seconds: float, trace: str) -> None:
    """One record of the job, stored after those before it (the report's order)."""
    store.records.add_tuning_records([NewRecord(workload_id=workload_id, fingerprint_id=GPU, target=CUDA_TARGET,
                                        tvm_version="0.27.0", trace=json.dumps(trace), run_secs=[seconds],
                                        job_id=job.id)])


def test_the_model_curve_starts_at_the_first_measured_task_and_says_how_many_are_estimated(store, tmp_path):
    # 1, 2 and 3 MFLOP a call.
    job, workload = _job(store, [1e6, 2e6, 3e6])
    _measure(store, job, workload["task0"], 1e-3, "a")  # 1 GFLOP/s: task1 estimated 2 ms, task2 3 ms
    _measure(store, job, workload["task0"], 1e10, "b")  # failed: no change
    _measure(store, job, workload["task1"], 1e-3, "c")  # measured 1 ms; rate 1.5 GFLOP/s: task2 2 ms
    _measure(store, job, workload["task2"], 4e-3, "d")  # every task measured
    _measure(store, job, workload["task0"], 5e-4, "e")

    report = job_report(store, job.id)
    assert report.model_curve == [
        ModelPoint(1, pytest.approx(6e-3), 2),
        ModelPoint(2, pytest.approx(6e-3), 2),
        ModelPoint(3, pytest.approx(4e-3), 1),
        ModelPoint(4, pytest.approx(6e-3), 0),
        ModelPoint(5, pytest.approx(5.5e-3), 0),
    ]
    assert report.every_task_measured_at == 4 and report.estimated_tasks == 0

    made = write_job_report(job.id, tmp_path / "report", store.url)
    assert made["model_curve_from_trial"] == 1 and made["every_task_measured_at"] == 4
    assert made["estimated_tasks"] == 0 and made["estimated_latency_ms"] == pytest.approx(5.5)
    page = (tmp_path / "report" / f"{job.id}.md").read_text()
    assert "the curve starts after trial 1" in page and "every task was measured after trial 4" in page
    assert (tmp_path / "report" / f"{job.id}.png").stat().st_size > 10_000


def test_a_job_that_never_measured_a_task_ends_with_it_estimated(store, tmp_path):
    job, workload = _job(store, [1e6, 2e6])
    _measure(store, job, workload["task1"], 2e-3, "a")

    report = job_report(store, job.id)
    assert report.model_curve == [ModelPoint(1, pytest.approx(3e-3), 1)]
    assert report.every_task_measured_at is None and report.estimated_tasks == 1
    png, page = write_report(report, tmp_path)
    assert png.is_file() and "1 of 2 tasks never measured" in page.read_text()


def test_many_tasks_are_plotted_in_microseconds_with_the_small_ones_grouped(store, tmp_path):
    from farm.report_plot import NAMED_TASKS, time_unit

    flops = [1e5 * (i + 1) for i in range(14)]
    job, workload = _job(store, flops)
    for step in range(3):
        for i in range(14):
            _measure(store, job, workload[f"task{i}"], (i + 1) * 1e-6 * (3 - step), f"{i}-{step}")
    report = job_report(store, job.id)
    assert report.model_curve[0] == ModelPoint(1, pytest.approx(sum(3e-6 * (i + 1) for i in range(14))), 13)
    png, _ = write_report(report, tmp_path)
    assert png.stat().st_size > 10_000
    assert time_unit([42e-6, 3e-6]) == ("us", 1e-6) and time_unit([2e-3]) == ("ms", 1e-3)
    assert time_unit([0.9995]) == ("ms", 1e-3) and time_unit([12.0]) == ("s", 1.0)
    assert len(flops) > NAMED_TASKS + 1  # so the plot groups the smallest as "other"


def test_a_two_phase_plan_is_told_phase_by_phase(store, tmp_path):
    from foundation.domain.job_spec import noted
    from foundation.domain.trial_phases import first_phase, first_phase_trials, second_phase
    from foundation.domain.trial_plan import TaskDemand, plan_trials

    job, workload = _job(store, [1e6, 2e6])
    first = first_phase(plan_trials([TaskDemand("task0", 1e6, 1), TaskDemand("task1", 2e6, 1)], 16))
    measured = [TaskDemand("task0", 1e6, 1, 1.0, ceiling_ms=0.01), TaskDemand("task1", 2e6, 1, 0.05, ceiling_ms=0.02)]
    plan = second_phase(first, measured, first_phase_trials(first), 100.0)
    store.update_job(job.id, options=noted(store.get_job(job.id), trial_plan=plan))
    _measure(store, job, workload["task0"], 1e-3, "a")
    write_job_report(job.id, tmp_path / "report", store.url)
    page = (tmp_path / "report" / f"{job.id}.md").read_text()
    assert f"in two phases: {plan.phases[0]} by each task's share" in page and "at 100 GFLOP/s" in page
    task0 = plan.tasks[0]
    assert f"| task0 | 1 | {task0.phases[0]} + {task0.phases[1]} | 1 |" in page
