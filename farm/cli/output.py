"""How commands speak: JSON on stdout for scripts, tables for people, errors on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from farm.errors import FarmError

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document on stdout (for scripts); no progress.")
REGISTRY_OPTION = typer.Option(
    None, "--registry", envvar="FARM_REGISTRY", show_envvar=True,
    help="SQLAlchemy URL of the registry (default: SQLite in the farm's data directory).",
)


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


def fail(err: FarmError) -> "typer.Exit":
    """Print a FarmError as one line on stderr and return the Exit to raise."""
    sys.stderr.write(f"error: {err}\n")
    sys.stderr.flush()
    return typer.Exit(err.exit_code)


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console():
    from rich.console import Console

    # soft_wrap: ids, hashes and target JSON must stay on one line for grep and copy-paste.
    return Console(highlight=False, soft_wrap=True)
