"""`farm models`, `farm fingerprint`, `farm jobs`: what the farm knows about."""

from __future__ import annotations

import dataclasses

import typer

from farm.cli.options import COORDINATOR_OPTION, JSON_OPTION, REGISTRY_OPTION
from farm.cli.output import emit_json, stdout_console

app = typer.Typer()


@app.command()
def models(json_output: bool = JSON_OPTION) -> None:
    """List the model zoo (any .onnx file can be submitted too)."""
    from foundation.models.zoo import ZOO, known_models

    rows = [
        {"name": name, "parameters": ZOO[name].parameter_count(), "input": ZOO[name].default_input,
         "description": ZOO[name].description}
        for name in known_models()
    ]
    if json_output:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("model", "parameters", "input (batch B)", "description", box=None)
    for row in rows:
        table.add_row(row["name"], f"{row['parameters']:,}", row["input"], row["description"])
    stdout_console().print(table)


@app.command()
def fingerprint(
    target: str = typer.Option("llvm", "--target", help="Which device to describe: llvm (this CPU) or cuda."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Show this box's hardware fingerprint: the key its tuning records are stored under."""
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.targets import parse_target_kind
    from foundation.hardware.versions import software_versions

    fp = local_fingerprint(parse_target_kind(target))
    software = software_versions(fp.kind if fp.kind != "cpu" else "llvm")
    if json_output:
        emit_json({**fp.to_json(), "software": software})
        return
    console = stdout_console()
    console.print(f"fingerprint  {fp.id}")
    console.print(f"summary      {fp.summary}")
    for k, v in fp.details.items():
        console.print(f"  {k:<18} {v}")
    console.print("software     " + ", ".join(f"{k} {v}" for k, v in software.items()))


@app.command()
def jobs(
    limit: int = typer.Option(20, "--limit", min=1),
    registry: str | None = REGISTRY_OPTION,
    coordinator: str | None = COORDINATOR_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """List recent jobs (of the coordinator, or of the registry), newest first.

    Without --coordinator, a job whose process died is marked failed first ("runner died").
    """
    if coordinator:
        from farm.cli.cluster import remote_jobs

        return remote_jobs(coordinator, limit, json_output)
    from farm.registry_jobs import RegistryJobs

    rows = RegistryJobs.open(registry).list(limit)
    if json_output:
        emit_json([dataclasses.asdict(j) for j in rows])
        return
    from rich.table import Table

    table = Table("job", "state", "hit", "model", "trials", "fingerprint", "created", box=None)
    for j in rows:
        table.add_row(j.id, j.state, "yes" if j.cache_hit else "", j.model_id[:12], str(j.trials_done),
                      j.fingerprint_id, j.created_at.strftime("%Y-%m-%d %H:%M:%S"))
    stdout_console().print(table)
