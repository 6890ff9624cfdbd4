"""How commands speak: JSON on stdout for scripts, tables for people, errors on stderr."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Sequence
from typing import Any

COLUMN_GAP = "   "


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


def write_error(line: str) -> None:
    """A command's last word on stderr, `error: <what> (<what to do>)`; a daemon logging JSON
    lines (--log-format json) says it as one more record, at error, so that every line of its
    stderr stays one JSON object for the log pipeline."""
    from foundation.logs import LogFormat, configured

    settings = configured()
    if settings is not None and settings[0] is LogFormat.JSON:
        logging.getLogger("farm").error(line)
        for handler in logging.getLogger().handlers:
            handler.flush()
        return
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, empty: str = "nothing to show") -> None:
    """Aligned columns as `kubectl get` prints them: upper-case headers, no box, a few spaces
    between columns, one line per row whatever the terminal's width (for grep and cut).
    ``empty`` goes to stderr when there is no row."""
    rows = [["-" if cell is None or cell == "" else str(cell) for cell in row] for row in rows]
    if not rows:
        sys.stderr.write(f"{empty}\n")
        return
    table = [[h.upper() for h in headers], *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        sys.stdout.write(COLUMN_GAP.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")
    sys.stdout.flush()


def print_fields(fields: Iterable[tuple[str, Any]]) -> None:
    """One `name  value` line per field, `kubectl describe` style; empty values are left out, and
    the lines of a value of several lines line up under its first."""
    fields = [(name, value) for name, value in fields if value not in (None, "", [], {})]
    width = max((len(name) for name, _ in fields), default=0) + 2
    for name, value in fields:
        text = str(value).replace("\n", "\n" + " " * width)
        sys.stdout.write(f"{name + ':':<{width}}{text}\n")
    sys.stdout.flush()


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def terminal_console():
    """A console on the terminal's stderr as it is now, which keeps reaching it while tuning
    points fd 2 at the job's log (foundation.processes.native_stderr)."""
    from rich.console import Console

    from foundation.processes.native_stderr import terminal_stderr

    return Console(file=terminal_stderr(), highlight=False, soft_wrap=True)


def stdout_console():
    from rich.console import Console

    # soft_wrap: ids, hashes and target JSON must stay on one line for grep and copy-paste.
    return Console(highlight=False, soft_wrap=True)
