"""`farm models`, `farm fingerprint`, `farm jobs`: what the farm knows about."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from farm.cli.options import (
    CLIENT_CERT_OPTION,
    CLIENT_KEY_OPTION,
    COORDINATOR_OPTION,
    JSON_OPTION,
    REGISTRY_OPTION,
    TLS_CA_OPTION,
    TOKEN_FILE_OPTION,
)
from farm.cli.output import emit_json, print_table, stdout_console

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
    print_table(("model", "parameters", "input (batch B)", "description"),
                [(r["name"], f"{r['parameters']:,}", r["input"], r["description"]) for r in rows])


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


def versions_text() -> str:
    """`farm --version`: farm's own, then the compiler stack's, without importing TVM."""
    import importlib.metadata

    from foundation.hardware.versions import software_versions

    try:
        farm_version = importlib.metadata.version("tvm-farm")
    except importlib.metadata.PackageNotFoundError:
        farm_version = "unknown (not installed: run scripts/setup)"
    found = software_versions("cuda")
    ffi = f" (tvm-ffi {found['tvm_ffi']})" if "tvm_ffi" in found else ""
    lines = [f"farm    {farm_version}", f"TVM     {found.get('tvm', 'unknown')}{ffi}",
             f"LLVM    {found.get('llvm', 'not found in TVM')}"]
    cuda = [f"{what} {found[key]}" for key, what in (("cuda_build", "TVM built with"), ("cuda_runtime", "runtime"),
                                                       ("nvcc", "nvcc"), ("nvidia_driver", "driver")) if key in found]
    if cuda:
        lines.append(f"CUDA    {', '.join(cuda)}")
    lines.append(f"Python  {found.get('python')}")
    return "\n".join(lines) + "\n"


@app.command()
def jobs(
    limit: int = typer.Option(20, "--limit", min=1),
    registry: str | None = REGISTRY_OPTION,
    coordinator: str | None = COORDINATOR_OPTION,
    token_file: Path | None = TOKEN_FILE_OPTION,
    tls_ca: Path | None = TLS_CA_OPTION,
    tls_cert: Path | None = CLIENT_CERT_OPTION,
    tls_key: Path | None = CLIENT_KEY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """List recent jobs (of the coordinator, or of the registry), newest first.

    Without --coordinator, a job whose process died is marked failed first ("runner died").
    """
    if coordinator:
        from farm.cli.cluster import client_of, remote_jobs

        return remote_jobs(client_of(coordinator, token_file, tls_ca, tls_cert, tls_key), limit, json_output)
    from farm.cli.views import JOB_COLUMNS, registry_job_row
    from farm.registry_jobs import RegistryJobs

    registry_jobs = RegistryJobs.open(registry)
    store = registry_jobs.store
    rows = registry_jobs.list(limit)
    if json_output:
        emit_json([dataclasses.asdict(j) for j in rows])
        return
    models = {m.id: m for m in store.list_models()}
    print_table(JOB_COLUMNS, [registry_job_row(j, models.get(j.model_id)) for j in rows],
                empty=f"no jobs in the registry at {store.url}")
