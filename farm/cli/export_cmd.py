"""`farm export`: a tuned model's library as a file TVM's runtime alone runs, with its spec beside it."""

from __future__ import annotations

from pathlib import Path

import typer

from farm.cli.command import FarmTyper
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, stderr_console, stdout_console

app = FarmTyper()


@app.command()
def export(
    model: str = typer.Argument(..., metavar="MODEL",
                                help="A zoo model (see `farm models`) or a path to an .onnx file."),
    target: str = typer.Argument(..., metavar="TARGET", help="llvm, cuda, or a TVM target JSON object."),
    batch: int = typer.Argument(..., metavar="BATCH", help="Batch size (for bert: number of sequences)."),
    out: Path = typer.Argument(..., metavar="OUT.so", help="The library to write; its spec goes beside it (OUT.json)."),
    weights_layout: str | None = env_option(
        None, "--weights-layout", command="export", metavar="LAYOUT",
        help="Export only an artifact of this form (plain, prepacked or prepacked-nchwc); default: the newest of any."),
    fingerprint: str | None = env_option(
        None, "--fingerprint", command="export", metavar="ID",
        help="Export this fingerprint's library: this CPU at another size (default: this box's, else the nearest "
             "such one's)."),
    seed: int = env_option(0, "--seed", command="export", metavar="N",
                           help="Seed for the random weights of a zoo model and the inputs the export is checked on."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Write the stored library for MODEL/TARGET/BATCH to OUT.so with its weights bound in, and OUT.json.

    Found as `farm run` finds it. TVM's runtime alone runs the file: load_module(OUT.so), a Relax
    VirtualMachine on it, `main` called with the model's inputs only.
    """
    from farm.api import load
    from farm.export import check_export_path, export_library
    from foundation.domain import request_limits as limits
    from foundation.units import size

    limits.check_number("--seed", seed, limits.SEED)
    check_export_path(out)  # before the load: a path that cannot be written costs nothing
    deployed = load(model, target, batch, registry=registry, seed=seed, weights_layout=weights_layout,
                    fingerprint=fingerprint)
    if not json_output:
        stderr_console().print(f"compiling {deployed.key.describe()} ({deployed.artifact.weights_layout} weights, "
                               f"artifact {deployed.artifact.id}) with its weights bound in")
    exported = export_library(deployed, out, seed=seed)
    if json_output:
        emit_json(exported.to_json())
        return
    document = exported.document
    console = stdout_console()
    console.print(f"exported     {exported.library}  ({size(document['size'])}, sha256 {document['sha256'][:16]}…)")
    console.print(f"spec         {exported.spec}")
    console.print(f"model        {deployed.key.describe()}  {document['weights_layout']} weights, bound in")
    if document["tuned_on"] != document["fingerprint"]:
        console.print(f"tuned on     {document['tuned_on']}, this CPU at another size")
    console.print(f"run it       farm run {exported.library}   (or TVM's runtime alone: examples/serve_exported.py)")
