"""The Markdown page of `farm report`: the job summed up, then a table of its tasks."""

from __future__ import annotations

from foundation.domain.job_spec import job_options
from foundation.domain.warm_start_use import describe as describe_warm_start
from foundation.domain.warm_start_use import job_warm_start
from foundation.units import duration, milliseconds, size, speedup_text

# How the stored latency was measured (docs/benchmarks.md, "Timing after tuning").
TIMING_NOTE = {
    "embedded": "timed by the validation on the box that tuned it, after tuning, with the tuning's worker processes "
                "stopped",
    "distributed": "timed by the validation on an agent of the fingerprint, between its shards (it tunes nothing "
                   "meanwhile; other agents sharing its box may have been)",
}


def markdown(report, image: str) -> str:
    """The page of ``report`` (a farm.report.JobReport), showing the picture file ``image``."""
    job, model, artifact = report.job, report.model, report.artifact
    stored = job_options(job)
    notes = stored.notes
    failed = sum(t.failed for t in report.tasks)
    rows = [
        ("state", job.state + (" (answered from the registry)" if job.cache_hit else "")),
        ("model", f"{model.name}, batch {model.batch} ({model.num_parameters:,} parameters)"),
        ("target", f"`{job.target}`"),
        ("fingerprint", f"{job.fingerprint_id}: {report.fingerprint_summary}" if job.fingerprint_id else "-"),
        ("trials", f"{report.trials} measured of {job.trials_budget} planned"
                   + (f", {failed} failed" if failed else "")),
        ("reuse", notes.reused.describe() if notes.reused else None),
        ("until", notes.until.summary() if notes.until else None),
        ("warm start", describe_warm_start(warm) if (warm := job_warm_start(notes.warm_start_used))
         else None),
        ("tuning time", _span(job)),
        ("error", job.error),
    ]
    if artifact is not None:
        speedup = (f" ({speedup_text(artifact.untuned_latency_mean_ms, artifact.latency_mean_ms)} than untuned, "
                   f"{milliseconds(artifact.untuned_latency_mean_ms)})" if artifact.untuned_latency_mean_ms else "")
        validation = artifact.validation or {}
        rows += [
            ("artifact", f"{artifact.id}, {size(artifact.size)}, sha256 `{artifact.sha256}`"),
            ("latency", f"{milliseconds(artifact.latency_mean_ms)} mean, {milliseconds(artifact.latency_median_ms)} "
                        f"median, {milliseconds(artifact.latency_std_ms)} std{speedup}"),
            ("validation", ("passed" if validation.get("passed") else "FAILED")
             + (f": max abs error {validation['max_abs_err']:.3g}" if "max_abs_err" in validation else "")),
        ]
    if report.model_curve:
        rows.append(("estimated from tuning", _estimate_text(report)))
    lines = [f"# {model.name} batch {model.batch}: job {job.id}", "", "| | |", "| --- | --- |"]
    lines += [f"| {name} | {value} |" for name, value in rows if value]
    lines += ["", f"![best latency against trials]({image})", ""]
    if artifact is not None:
        how = TIMING_NOTE[stored.spec.mode]
        lines += [f"The latency was {how}: {stored.spec.validation_runs} runs after 3 warm-up runs. "
                  "Candidates measured during tuning share the cores with candidates being built, so the estimate "
                  "from tuning reads high on a busy box; `farm run` times the artifact again.", ""]
    plan = notes.trial_plan
    planned = {t.name: t for t in plan.tasks} if plan else {}
    lines += ["## Tasks", "", f"Task names and weights come from {report.tasks_from}."]
    phased = plan is not None and len(plan.phases) == 2 and any(len(t.phases) == 2 for t in plan.tasks)
    if plan and planned and phased:
        peak = f"{plan.peak_gflops:g} GFLOP/s, the box's measured peak" if plan.peak_gflops else "no known peak"
        lines += ["", f"The trial plan gave {plan.total} of {plan.budget} trials in two phases: {plan.phases[0]} by "
                      "each task's share of the model's latency as estimated before tuning (FLOPs x calls, or "
                      f"measured times where the registry had them), then {plan.phases[1]} by what each task lost "
                      f"against its ceiling after the first (its best time x calls less its FLOPs at {peak}); "
                      "planned is first + second, the estimated share the second's."]
    elif plan and planned:
        lines += ["", f"The trial plan gave {plan.total} of {plan.budget} trials by each task's share of the "
                      "model's latency as estimated before tuning (FLOPs x calls, or measured times where the "
                      "registry had them); tasks with nothing to tune got a small cap."]
    lines += ["", "| task | weight | planned | trials | failed | first valid | best | estimated share | "
                  "share of the model |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    total = sum((t.final or 0) * t.weight for t in report.tasks) or 1.0
    for task in sorted(report.tasks, key=lambda t: -(t.final or 0) * t.weight):
        share = f"{(task.final or 0) * task.weight / total:.0%}" if task.final else "-"
        line = planned.get(task.name)
        plan_cells = ("- | ", "-")
        if line:
            trials = f"{line.phases[0]} + {line.phases[1]}" if len(line.phases) == 2 else str(line.trials)
            plan_cells = (f"{trials}{' (nothing to tune)' if line.minor else ''} | ", f"{line.share:.0%}")
        lines.append(f"| {task.name} | {task.weight} | {plan_cells[0]}{task.trials} | {task.failed} | "
                     f"{duration(task.first_valid)} | {duration(task.final)} | {plan_cells[1]} | {share} |")
    return "\n".join(lines) + "\n"


def _estimate_text(report) -> str:
    """The model's final estimate from tuning, and from which trial the curve has one."""
    final, first = report.model_curve[-1], report.model_curve[0]
    text = f"{milliseconds(final.seconds * 1e3)} (each task's best measured time by its weight"
    if final.estimated_tasks:
        text += (f"; {final.estimated_tasks} of {len(report.tasks)} tasks never measured, counted at their FLOPs "
                 "at the measured tasks' rate")
    text += f"); the curve starts after trial {first.trials}"
    if report.every_task_measured_at is not None and first.estimated_tasks:
        text += f", estimated in part until every task was measured after trial {report.every_task_measured_at}"
    return text


def _span(job) -> str | None:
    if job.started_at is None:
        return None
    if job.finished_at is None:
        return f"running since {job.started_at:%Y-%m-%d %H:%M:%S} UTC"
    return (f"{duration((job.finished_at - job.started_at).total_seconds())} "
            f"({job.started_at:%Y-%m-%d %H:%M:%S} to {job.finished_at:%H:%M:%S} UTC)")
