"""`farm status`, `farm cancel`, `farm agents`, and submit/jobs through a coordinator."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from farm.cli.options import (
    CLIENT_CERT_OPTION,
    CLIENT_KEY_OPTION,
    JSON_OPTION,
    REQUIRED_COORDINATOR,
    TLS_CA_OPTION,
    TOKEN_FILE_OPTION,
)
from farm.cli.output import emit_json, stderr_console, stdout_console

app = typer.Typer()



@app.command()
def status(
    job_id: str = typer.Argument(..., help="The job id (job-…)."),
    coordinator: str = REQUIRED_COORDINATOR,
    token_file: Path | None = TOKEN_FILE_OPTION,
    tls_ca: Path | None = TLS_CA_OPTION,
    tls_cert: Path | None = CLIENT_CERT_OPTION,
    tls_key: Path | None = CLIENT_KEY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Show one job of the coordinator."""
    from farm.client import job_json

    job = client_of(coordinator, token_file, tls_ca, tls_cert, tls_key).get_job(job_id)
    _print_job(job_json(job), json_output)


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="The job id (job-…)."),
    coordinator: str = REQUIRED_COORDINATOR,
    token_file: Path | None = TOKEN_FILE_OPTION,
    tls_ca: Path | None = TLS_CA_OPTION,
    tls_cert: Path | None = CLIENT_CERT_OPTION,
    tls_key: Path | None = CLIENT_KEY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Cancel a job: its leases are released and its agents stop that work."""
    from farm.client import job_json

    job = client_of(coordinator, token_file, tls_ca, tls_cert, tls_key).cancel(job_id, "cancelled by the user")
    _print_job(job_json(job), json_output)


@app.command()
def agents(
    coordinator: str = REQUIRED_COORDINATOR,
    include_lost: bool = typer.Option(False, "--all", help="Include agents whose heartbeat lapsed."),
    token_file: Path | None = TOKEN_FILE_OPTION,
    tls_ca: Path | None = TLS_CA_OPTION,
    tls_cert: Path | None = CLIENT_CERT_OPTION,
    tls_key: Path | None = CLIENT_KEY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """List the agents registered with the coordinator."""
    from google.protobuf.json_format import MessageToDict

    rows = client_of(coordinator, token_file, tls_ca, tls_cert, tls_key).list_agents(include_lost)
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


def client_of(coordinator: str, token_file=None, tls_ca=None, tls_cert=None, tls_key=None):
    """A CoordinatorClient presenting the token and TLS settings the command was given."""
    from farm.client import CoordinatorClient
    from foundation.wire.access import ChannelAccess

    return CoordinatorClient(coordinator, access=ChannelAccess.from_files(token_file, tls_ca, tls_cert, tls_key))


def remote_jobs(client, limit: int, json_output: bool) -> None:
    from farm.client import job_json

    rows = [job_json(j) for j in client.list_jobs(limit)]
    if json_output:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("job", "state", "hit", "model", "batch", "trials", "fingerprint", "status", box=None)
    for j in rows:
        table.add_row(j["job"], j["state"], "yes" if j["cache_hit"] else "", j["model"], str(j["batch"]),
                      f"{j['trials']}/{j['trials_budget']}", j["fingerprint"] or "-", j["status"])
    stdout_console().print(table)


def remote_submit(client, *, model: str, target: str, batch: int, trials, trials_per_task,
                  retune: bool, seed: int, fingerprint, runs: int, wait: bool, timeout,
                  json_output: bool) -> None:
    """Submit through the coordinator; with --wait, follow the job(s) to a final state."""
    from farm.client import final, job_json, job_state_name

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
    if json_output:
        emit_json(documents[0] if len(documents) == 1 else {"jobs": documents})
    else:
        for doc in documents:
            _print_job(doc, False)
    if wait:
        timed_out = [d for d in documents if not final(d["state"])]
        if timed_out:
            stderr_console().print(f"error: timed out after {timeout:g} s waiting for "
                                   f"{', '.join(d['job'] for d in timed_out)} (it keeps running; see `farm status`)")
            raise typer.Exit(6)
        if any(d["state"] != "succeeded" for d in documents):
            raise typer.Exit(1)


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
    console.print(f"trials       {doc['trials']}/{doc['trials_budget']}  shards {doc['shards']}")
    if doc["error"]:
        console.print(f"error        {doc['error']}")
    art = doc["artifact"]
    if art:
        lat = art["latency_ms"]
        console.print(f"artifact     {art['id']}  sha256 {art['sha256'][:16]}…  "
                      f"mean {lat['mean']:.3f} ms  median {lat['median']:.3f} ms  std {lat['std']:.3f} ms")
