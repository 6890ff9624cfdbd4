"""Options several commands share, each settable from the environment where a deployment sets it."""

from __future__ import annotations

import typer

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document on stdout (for scripts); no progress.")
REGISTRY_OPTION = typer.Option(
    None, "--registry", envvar="FARM_REGISTRY", show_envvar=True,
    help="SQLAlchemy URL of the registry (default: SQLite in the farm's data directory).",
)
COORDINATOR_OPTION = typer.Option(
    None, "--coordinator", envvar="FARM_COORDINATOR", show_envvar=True,
    help="host:port of a coordinator; without it commands run embedded on this box.",
)
REQUIRED_COORDINATOR = typer.Option(
    ..., "--coordinator", envvar="FARM_COORDINATOR", show_envvar=True, help="host:port of the coordinator.",
)
