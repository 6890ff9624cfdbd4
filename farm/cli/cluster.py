"""`farm status`, `farm cancel`, `farm agents`, and submit/jobs through a coordinator.

`status` and `cancel` work on a coordinator's jobs with --coordinator, and on the registry's
(embedded) jobs without one (farm.registry_jobs).
"""

from __future__ import annotations

import time

import typer

from farm.cli.options import COORDINATOR_OPTION, JSON_OPTION, REGISTRY_OPTION, REQUIRED_COORDINATOR
from farm.cli.output import emit_json, stderr_console, stdout_console
from foundation.errors import JobFailed, TimedOut

app = typer.Typer()

JOB_ARG = typer.Argument(..., help="The job id (job-…).")


@app.command()
def status(
    job_id: str = JOB_ARG,
    coordinator: str | None = COORDINATOR_OPTION,
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Show one job: a coordinator's with --coordinator, else the registry's (a job whose
    process died is marked failed first)."""
    if coordinator:
        from farm.client import CoordinatorClient, job_json

        _print_job(job_json(CoordinatorClient(coordinator).get_job(job_id)), json_output)
        return
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    _print_job(jobs.document(jobs.get(job_id)), json_output)


@app.command()
def cancel(
    job_id: str = JOB_ARG,
    coordinator: str | None = COORDINATOR_OPTION,
    registry: str | None = REGISTRY_OPTION,
    wait: float = typer.Option(60.0, "--wait", min=0,
                               help="Without --coordinator: seconds to wait for the job's process to stop it."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Cancel a job. A coordinator's job: its leases are released and its agents stop that work.
    A job running embedded in another process: that process is asked to stop after the batch
    in flight (its records are kept), and this waits for it."""
    if coordinator:
        from farm.client import CoordinatorClient, job_json

        _print_job(job_json(CoordinatorClient(coordinator).cancel(job_id, "cancelled by the user")), json_output)
        return
    from farm.registry_jobs import RegistryJobs

    jobs = RegistryJobs.open(registry)
    job = jobs.cancel(job_id, wait)
    document = jobs.document(job)
    if job.state in ("succeeded", "failed", "cancelled"):
        _print_job(document, json_output)
        return
    raise TimedOut(f"job {job_id} was asked to stop, and is still {job.state} after {wait:g} s",
                   f"its process ({job.runner.describe()}) stops after the batch in flight; see `farm status {job_id}`",
                   document=document if json_output else None)


@app.command()
def agents(
    coordinator: str = REQUIRED_COORDINATOR,
    include_lost: bool = typer.Option(False, "--all", help="Include agents whose heartbeat lapsed."),
    json_output: bool = JSON_OPTION,
) -> None:
    """List the agents registered with the coordinator."""
    from google.protobuf.json_format import MessageToDict

    from farm.client import CoordinatorClient

    rows = CoordinatorClient(coordinator).list_agents(include_lost)
    if json_output:
        emit_json([MessageToDict(a, preserving_proto_field_name=True) for a in rows])
        return
    from rich.table import Table

    from foundation.wire import farm_pb2

    table = Table("agent", "state", "fingerprint", "kinds", "host", "leases", "rpc", box=None)
    for a in rows:
        table.add_row(a.id, farm_pb2.AgentState.Name(a.state).removeprefix("AGENT_STATE_").lower(),
                      a.fingerprint_id, ",".join(a.target_kinds), a.hostname, str(len(a.running_leases)),
                      "serving" if a.rpc_server_serving else "down")
    stdout_console().print(table)


def remote_jobs(coordinator: str, limit: int, json_output: bool) -> None:
    from farm.client import CoordinatorClient, job_json

    rows = [job_json(j) for j in CoordinatorClient(coordinator).list_jobs(limit)]
    if json_output:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("job", "state", "hit", "model", "batch", "trials", "fingerprint", "status", box=None)
    for j in rows:
        table.add_row(j["job"], j["state"], "yes" if j["cache_hit"] else "", j["model"], str(j["batch"]),
                      f"{j['trials']}/{j['trials_budget']}", j["fingerprint"] or "-", j["status"])
    stdout_console().print(table)


def remote_submit(coordinator: str, *, model: str, target: str, batch: int, trials, trials_per_task,
                  retune: bool, seed: int, fingerprint, runs: int, wait: bool, timeout,
                  json_output: bool) -> None:
    """Submit through the coordinator; with --wait, follow the job(s) to a final state."""
    from farm.client import CoordinatorClient, final, job_json, job_state_name

    client = CoordinatorClient(coordinator)
    submitted = client.submit(model, target, batch, trials=trials, trials_per_task=trials_per_task,
                              retune=retune, seed=seed, fingerprint=fingerprint, validation_runs=runs)
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
    document = documents[0] if len(documents) == 1 else {"jobs": documents}
    if not json_output:
        for doc in documents:
            _print_job(doc, False)
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
            best = f"best {p.best_us:,.1f} us" if p.best_us else "best -"
            console.print(f"{job.id}: {p.task_name[:40]:<40} {p.trials:>4}/{p.budget:<4} {best}")
        elif kind == "shard_changed":
            s = event.shard_changed
            console.print(f"{job.id}: shard {s.shard_id} {s.reason or ''} (attempt {s.attempt}, agent {s.agent_id})")
    return client.get_job(job.id)


def _print_job(doc: dict, json_output: bool) -> None:
    if json_output:
        emit_json(doc)
        return
    console = stdout_console()
    console.print(f"job          {doc['job']}  {doc['state']}{'  (registry hit)' if doc['cache_hit'] else ''}")
    console.print(f"status       {doc['status']}")
    console.print(f"model        {doc['model']} batch {doc['batch']}  target {doc['target']}")
    console.print(f"fingerprint  {doc['fingerprint']}")
    console.print(f"trials       {doc['trials']}/{doc['trials_budget']}"
                  + (f"  shards {doc['shards']}" if doc.get("shards") else ""))
    if doc.get("runner"):
        console.print(f"runner       {doc['runner']}")
    if doc["error"]:
        console.print(f"error        {doc['error']}")
    art = doc["artifact"]
    if art:
        lat = art["latency_ms"]
        console.print(f"artifact     {art['id']}  sha256 {art['sha256'][:16]}…  "
                      f"mean {lat['mean']:.3f} ms  median {lat['median']:.3f} ms  std {lat['std']:.3f} ms")
