"""`farm report JOB`: best latency against trials as a PNG, and a Markdown summary, from the registry."""

from __future__ import annotations

from pathlib import Path

import typer

from farm.cli.command import FarmTyper
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, stdout_console

app = FarmTyper()


@app.command()
def report(
    job_id: str = typer.Argument(..., metavar="JOB", help="The job id (job-…); see `farm jobs`."),
    out: Path = env_option(Path("."), "--out", "-o", command="report", metavar="DIR",
                           help="Directory to write JOB.png and JOB.md into."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Plot a job's best latency against trials (per task and for the model) and sum it up in Markdown.

    A distributed job's records are in the coordinator's registry: pass it with --registry.
    """
    document = write_job_report(job_id, out, registry)
    if json_output:
        emit_json(document)
    else:
        stdout_console().print(f"report       {document['markdown']} and {document['png']}")


def check_report_dir(out: Path) -> None:
    """Refuse a --report directory that cannot be made or written before the job, not after it:
    the job's result would be lost behind the error. Creates nothing that is not there."""
    import os

    from farm.report_plot import require_matplotlib
    from foundation.errors import BadInput, path_error

    require_matplotlib()  # the job's end would find it missing, its result behind the error
    if out.exists():
        if not out.is_dir():
            raise BadInput(f"--report {out} is not a directory", "give a directory, or a path where one can be made")
        if not os.access(out, os.W_OK | os.X_OK):
            raise BadInput(f"cannot write the report into {out}: permission denied", "choose a directory you can write")
        return
    missing = out
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    try:
        out.mkdir(parents=True)
    except OSError as err:
        raise path_error(err, err.filename or out, doing="create the report directory") from None
    # Made only to try: the job's end makes it again.
    for made in [out, *out.parents]:
        made.rmdir()
        if made == missing:
            break


def write_job_report(job_id: str, out: Path, registry: str | None) -> dict:
    """Write the report of ``job_id`` into ``out``; return what was written, as JSON."""
    from farm.report import job_report, write_report
    from farm.report_plot import require_matplotlib
    from foundation.domain.job_spec import job_notes
    from foundation.domain.warm_start_use import job_warm_start
    from foundation.errors import path_error
    from foundation.registry.opening import open_store

    require_matplotlib()
    made = job_report(open_store(registry), job_id)
    try:
        png, page = write_report(made, out)
    except OSError as err:
        raise path_error(err, err.filename or out, doing="write the report into") from None
    document = {
        "job": job_id, "png": str(png), "markdown": str(page), "trials": made.trials,
        "estimated_latency_ms": made.model_curve[-1].seconds * 1e3 if made.model_curve else None,
        # The model's curve starts at the first measured task; until every task is measured, the
        # others are estimated (farm.report.ModelPoint): how many the final estimate still counts so.
        "estimated_tasks": made.estimated_tasks,
        "model_curve_from_trial": made.model_curve[0].trials if made.model_curve else None,
        "every_task_measured_at": made.every_task_measured_at,
        "warm_start": job_warm_start(job_notes(made.job).warm_start_used),
        "tasks": [{"task": t.name, "weight": t.weight, "trials": t.trials, "failed": t.failed,
                   "best_ms": None if t.final is None else t.final * 1e3} for t in made.tasks],
    }
    return document
