"""`farm status`, `farm cancel`, `farm agents`, and submit/jobs through a coordinator.

`status` and `cancel` work on a coordinator's jobs with --coordinator, and on the registry's
(embedded) jobs without one (farm.registry_jobs).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from farm.cli.command import FarmTyper
from farm.cli.coordinator_options import coordinator_options
from farm.cli.options import JOB_ARG, JSON_OPTION, REGISTRY_OPTION, env_option, finite_number
from farm.cli.output import emit_json, print_fields, print_table, stderr_console
from farm.cli.views import AGENT_COLUMNS, JOB_COLUMNS, agent_row, job_fields, job_row, jobs_described
from farm.connection import Coordinator
from foundation.errors import JobFailed, TimedOut
from foundation.units import duration

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.submission import Submission

app = FarmTyper()

@app.command()
@coordinator_options()
def status(
    job_id: str = JOB_ARG,
    coordinator: Coordinator = None,
    registry: str | None = REGISTRY_OPTION,
    watch: bool = env_option(False, "--watch", command="status",
                             help="Redraw the job until it ends (plain lines when stdout is no terminal); "
                                  "exit as `farm wait` does."),
    interval: float = env_option(2.0, "--interval", command="status", parser=finite_number(0.1),
                                 metavar="SECONDS", help="With --watch: seconds between reads."),
    timeout: float | None = env_option(None, "--timeout", command="status", parser=finite_number(0),
                                       metavar="SECONDS",
                                       help="With --watch: give up after this many seconds (exit 5)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show one job: a coordinator's with --coordinator, else the registry's (a job whose
    process died is marked failed first)."""
    if watch:
        from farm.cli.job_watch import watch as watch_job

        return watch_job(job_id, coordinator, registry, interval, timeout, json_output)
    if coordinator.address:
        from farm.client import job_json

        job = coordinator.client().get_job(job_id)
        _print_job(job_json(job), json_output)
        return
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    _print_job(jobs.document(jobs.get(job_id)), json_output)


@app.command()
@coordinator_options()
def cancel(
    job_id: str = JOB_ARG,
    coordinator: Coordinator = None,
    registry: str | None = REGISTRY_OPTION,
    wait: float = env_option(60.0, "--wait", command="cancel", parser=finite_number(0), metavar="SECONDS",
                             help="Without --coordinator: seconds to wait for the job's process to stop it."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Cancel a job. A coordinator's job: its leases are released and its agents stop that work.
    A job running embedded in another process: that process is asked to stop after the batch
    in flight (its records are kept), and this waits for it."""
    if coordinator.address:
        from farm.client import job_json

        job = coordinator.client().cancel(job_id, "cancelled by the user")
        _print_job(job_json(job), json_output)
        return
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    job = jobs.cancel(job_id, wait)
    document = jobs.document(job)
    if job.state.is_final:
        _print_job(document, json_output)
        return
    raise TimedOut(f"job {job_id} was asked to stop, and is still {job.state} after {wait:g} s",
                   f"its process ({job.runner.describe()}) stops after the batch in flight; see `farm status {job_id}`",
                   document=document if json_output else None)


@app.command()
@coordinator_options(required=True)
def agents(
    coordinator: Coordinator = None,
    include_lost: bool = env_option(False, "--all", command="agents", help="Include agents whose heartbeat lapsed."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List the agents registered with the coordinator."""
    from farm.client import agent_json

    documents = [agent_json(a) for a in coordinator.client().list_agents(include_lost)]
    if json_output:
        emit_json(documents)
        return
    print_table(AGENT_COLUMNS, [agent_row(d) for d in documents],
                empty="no agents registered" + ("" if include_lost else " and alive (--all lists lost ones)"))


def remote_jobs(client, limit: int, json_output: bool, states: list[str] = (), model: str | None = None) -> None:
    from farm.client import job_json

    rows = [job_json(j) for j in client.list_jobs(limit, states, model)]
    if json_output:
        emit_json(rows)
        return
    print_table(JOB_COLUMNS, [job_row(j) for j in rows],
                empty=f"no {jobs_described(states, model)} at {client.address}")


def remote_submit(client, submission: "Submission", *, wait: bool, timeout, json_output: bool, report_dir=None,
                  registry: str | None = None) -> None:
    """Submit through the coordinator; with --wait, follow the job(s) to a final state (and with
    ``report_dir``, write each tuned job's report from ``registry``, the coordinator's)."""
    from farm.client import final, job_json, job_state_name

    submitted = client.submit(submission)
    jobs = [s.job for s in submitted]
    console = None if json_output else stderr_console()
    if console:
        for s in submitted:
            console.print(f"job {s.job.id} {'(attached to the running job) ' if s.attached else ''}"
                          f"{job_state_name(s.job.state)}: {s.job.status}")
    deadline = None if timeout is None else time.monotonic() + timeout
    if wait:
        jobs = [_follow(client, job, deadline, console) for job in jobs]
    documents = [job_json(j) for j in jobs]
    if wait and report_dir is not None:
        from farm.cli.report_cmd import write_job_report

        for doc in documents:
            if final(doc["state"]) and not doc["cache_hit"]:
                doc["report"] = write_job_report(doc["job"], report_dir, registry)
    document = documents[0] if len(documents) == 1 else {"jobs": documents}
    if not json_output:
        for doc in documents:
            _print_job(doc, False)
            if doc.get("report"):
                print(f"Report:       {doc['report']['markdown']} and {doc['report']['png']}")
            if len(documents) > 1:
                print()
    shown = document if json_output else None  # an error's JSON document carries the jobs
    timed_out = [d for d in documents if not final(d["state"])] if wait else []
    if timed_out:
        raise TimedOut(f"timed out after {timeout:g} s waiting for {', '.join(d['job'] for d in timed_out)}",
                       "it keeps running; see `farm status`", document=shown)
    failed = [d for d in documents if d["state"] != "succeeded"] if wait else []
    if failed:
        raise JobFailed("; ".join(f"job {d['job']} {d['state']}: {d['error']}" for d in failed),
                        "see `farm status JOB --coordinator ...` for its shards and events", document=shown)
    if json_output:
        emit_json(document)


def _follow(client, job, deadline, console):
    from farm.client import final, job_state_name

    if final(job_state_name(job.state)):
        return job
    for event in client.watch(job.id, deadline):
        kind = event.WhichOneof("event")
        if console is None:
            continue
        if kind == "state_changed":
            c = event.state_changed
            console.print(f"{job.id}: {job_state_name(c.to_state)} {c.status}")
        elif kind == "task_progress":
            p = event.task_progress
            best = f"best {duration(p.best_us / 1e6)}" if p.best_us else "best -"
            console.print(f"{job.id}: {p.task_name[:40]:<40} {p.trials:>4}/{p.budget:<4} {best}")
        elif kind == "shard_changed":
            s = event.shard_changed
            held = f" by {s.agent_id}" if s.agent_id else ""
            console.print(f"{job.id}: {s.shard_id} attempt {s.attempt}{held}" + (f": {s.reason}" if s.reason else ""))
    return client.get_job(job.id)


def _print_job(doc: dict, json_output: bool) -> None:
    if json_output:
        emit_json(doc)
        return
    print_fields(job_fields(doc))
