"""The `farm` entry point: composes the command groups and maps errors to exit codes."""

from __future__ import annotations

import sys

import typer

from farm.cli import cluster, coordinator_cmd, info, registry, submit

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
app.registered_commands += submit.app.registered_commands
app.registered_commands += info.app.registered_commands
app.registered_commands += cluster.app.registered_commands
app.registered_commands += coordinator_cmd.app.registered_commands
app.add_typer(registry.app, name="registry", help="Inspect, import into, export from and upgrade the registry.")


def main() -> None:
    from farm.errors import FarmError

    try:
        app()
    except FarmError as err:  # raised outside a command's own handling
        sys.stderr.write(f"error: {err}\n")
        sys.exit(err.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
