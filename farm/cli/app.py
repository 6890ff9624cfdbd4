"""The `farm` entry point: composes the command groups and is the one place errors become exit codes."""

from __future__ import annotations

import sys

import typer

from farm.cli import agent_cmd, cluster, coordinator_cmd, info, registry, report_cmd, submit
from foundation.errors import FarmError

# rich_markup_mode=None: typer's rich help and usage errors import rich.markdown and pygments,
# ~0.5 s before `farm --help` prints anything (bench/startup.py); click's plain help is enough.
app = typer.Typer(
    name="farm",
    help="tvm-farm: shared, incremental tuning for Apache TVM. Tune once per hardware fingerprint, reuse everywhere.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# Groups added without a name contribute their commands at the top level.
app.add_typer(submit.app)
app.add_typer(info.app)
app.add_typer(cluster.app)
app.add_typer(coordinator_cmd.app)
app.add_typer(agent_cmd.app)
app.add_typer(report_cmd.app)
app.add_typer(registry.app, name="registry", help="Inspect, import into, export from and upgrade the registry.")


def _print_version(asked: bool) -> None:
    if asked:
        sys.stdout.write(info.versions_text())
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the versions of farm, TVM, LLVM and CUDA (when present), and exit."),
) -> None:
    """tvm-farm: shared, incremental tuning for Apache TVM. Tune once per hardware fingerprint, reuse everywhere."""


def main() -> None:
    """Run the command line; a FarmError from any command is one line on stderr and its exit code."""
    try:
        app()
    except FarmError as err:
        sys.stderr.write(f"error: {err}\n")
        sys.stderr.flush()
        sys.exit(err.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
