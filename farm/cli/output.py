"""How commands speak: JSON on stdout for scripts, tables for people, errors on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, default=str, sort_keys=False) + "\n")
    sys.stdout.flush()


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def stdout_console():
    from rich.console import Console

    # soft_wrap: ids, hashes and target JSON must stay on one line for grep and copy-paste.
    return Console(highlight=False, soft_wrap=True)
