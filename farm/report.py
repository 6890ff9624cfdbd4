"""`farm report`: a job's tuning as a picture and a page, from what the registry kept of it.

The picture (PNG, farm.report_plot) plots the best latency found against trials, for each task
and for the model (each task's best time by its weight, as MetaSchedule's scheduler reckons the
whole), with the artifact's measured latency beside it; the page (Markdown) sums the job up.
Records are the job's own, in the order they were stored: one per measured candidate, failures
included. The model's curve starts at the first measured task: until every task is measured,
the others are counted at their FLOPs at the measured tasks' rate (foundation.domain.model_estimate)
and the curve's points say how many were.

A record names its workload, not its task. The task names and weights come from the job's plan
(distributed jobs), else from the task list the tuner wrote into the job's work directory on the
box that tuned it (embedded jobs, foundation.meta_schedule.tuner), else each workload stands
for itself with weight 1, and the page says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from farm.report_page import markdown
from farm.report_plot import plot
from foundation import config
from foundation.domain.job_spec import job_notes
from foundation.domain.model_estimate import model_estimate
from foundation.domain.trial_plan import TaskDemand
from foundation.errors import NotFound, path_error
from foundation.registry.store import RegistryStore


@dataclass
class TaskCurve:
    """A task's best latency (seconds) after each of its trials; None until one was valid."""

    name: str
    weight: int
    workload_id: int | None
    flop: float = 0.0  # of one call; 0 where the report does not know it
    best: list[float | None] = field(default_factory=list)
    failed: int = 0

    @property
    def trials(self) -> int:
        return len(self.best)

    @property
    def final(self) -> float | None:
        return self.best[-1] if self.best else None

    @property
    def first_valid(self) -> float | None:
        return next((b for b in self.best if b is not None), None)


class ModelPoint(NamedTuple):
    """The model's estimated latency after ``trials`` of the job's trials."""

    trials: int
    seconds: float
    estimated_tasks: int  # tasks not measured yet, counted at their FLOPs at the measured ones' rate


@dataclass
class JobReport:
    job: object  # foundation.registry.entities.Job
    model: object  # Model
    artifact: object | None  # Artifact
    fingerprint_summary: str
    tasks: list[TaskCurve]
    tasks_from: str  # where the task names and weights came from
    model_curve: list[ModelPoint]  # from the first trial that gives an estimate

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def estimated_tasks(self) -> int | None:
        """Tasks the final estimate counts at an estimated time (0: every task measured); None
        without an estimate."""
        return self.model_curve[-1].estimated_tasks if self.model_curve else None

    @property
    def every_task_measured_at(self) -> int | None:
        """The trial after which every task had a measured schedule, if one did."""
        return next((p.trials for p in self.model_curve if p.estimated_tasks == 0), None)


def job_report(store: RegistryStore, job_id: str) -> JobReport:
    """The report of ``job_id`` from ``store``."""
    job = store.get_job(job_id)
    if job.cache_hit:
        artifact = store.get_artifact(job.artifact_id) if job.artifact_id else None
        origin = f"; its artifact came from job {artifact.job_id}: `farm report {artifact.job_id}`" if artifact else ""
        raise NotFound(f"job {job_id} was answered from the registry and tuned nothing", f"nothing to plot{origin}")
    measurements = store.records.job_measurements(job_id)
    reused = job_notes(job).reused
    if not measurements and not (reused is not None and reused.tasks and reused.skipped == reused.tasks):
        raise NotFound(f"job {job_id} has no tuning records in the registry at {store.url}",
                       "a job reports once it has measured candidates; a distributed job's records are "
                       "in the coordinator's registry (--registry)")
    if measurements:
        tasks, tasks_from = _tasks_of(store, job_id, {w for w, _ in measurements})
    else:  # built from the registry's records alone: the page says so, the plot shows the library
        tasks, tasks_from = [], "nowhere: every task was reused from the registry's records, none was measured"
    by_workload = {t.workload_id: t for t in tasks}
    model_curve = []
    for count, (workload_id, mean_sec) in enumerate(measurements, start=1):
        task = by_workload[workload_id]
        valid = mean_sec is not None and math.isfinite(mean_sec)
        task.failed += not valid
        improved = valid and (task.final is None or mean_sec < task.final)
        task.best.append(mean_sec if improved else task.final)
        point = model_point(tasks, count)
        if point is not None:
            model_curve.append(point)
    artifact = store.get_artifact(job.artifact_id) if job.artifact_id else None
    fingerprint = store.get_fingerprint(job.fingerprint_id) if job.fingerprint_id else None
    return JobReport(job, store.get_model(job.model_id), artifact, fingerprint.summary if fingerprint else "",
                     tasks, tasks_from, model_curve)


def model_point(tasks: list[TaskCurve], trials: int) -> ModelPoint | None:
    """The model's estimate after ``trials``, from each task's best so far (None: no estimate yet)."""
    estimate = model_estimate([TaskDemand(t.name, t.flop, t.weight, None if t.final is None else t.final * 1e3)
                               for t in tasks])
    return None if estimate is None else ModelPoint(trials, estimate.seconds, estimate.estimated_tasks)


def _tasks_of(store: RegistryStore, job_id: str, workload_ids: set[int]) -> tuple[list[TaskCurve], str]:
    from coordinator.cluster_store import ClusterStore

    planned = ClusterStore(store).plans.job_tasks(job_id)
    if planned:
        return [TaskCurve(t.name, t.weight, t.workload_id, t.flop) for t in planned], "the job's plan"
    task_list = config.job_work_dir(job_id) / "tasks.json"
    if task_list.is_file():
        listed = json.loads(task_list.read_text())
        by_shash: dict[str, list[int]] = {}
        for workload_id, (shash, _) in store.records.get_workloads(workload_ids).items():
            by_shash.setdefault(shash, []).append(workload_id)
        tasks = [TaskCurve(t["name"], int(t["weight"]), (by_shash.get(t["workload_shash"]) or [None])[0],
                           float(t.get("flop") or 0.0)) for t in listed]
        known = {t.workload_id for t in tasks}
        if workload_ids <= known:
            return tasks, f"the tuner's task list ({task_list})"
    return ([TaskCurve(f"workload {w}", 1, w) for w in sorted(workload_ids)],
            "nowhere: the job has no plan in the registry and its task list is not on this box, so each "
            "workload is shown with weight 1 and the model curve is not the model's latency")


def write_report(report: JobReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``JOB.png`` and ``JOB.md`` into ``out_dir``; return their paths."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise path_error(err, err.filename or out_dir, doing="create the report directory") from None
    png = out_dir / f"{report.job.id}.png"
    page = out_dir / f"{report.job.id}.md"
    plot(report, png)
    page.write_text(markdown(report, png.name))
    return png, page
