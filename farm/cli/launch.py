"""The `farm` console script: imports the command line and runs it. A Ctrl-C while it imports
(typer, the command groups: a few hundred milliseconds before any command runs) ends as one
during a command does (farm.cli.app), not with the import's traceback."""

from __future__ import annotations

import json
import os
import sys

EXIT_INTERRUPTED = 130  # foundation.errors.Interrupted for SIGINT, not imported: it may be what was cut short


def main() -> None:
    # numpy's OpenBLAS starts a thread for each further core as it is imported; a farm process does
    # no BLAS work worth one, and one whose threads are all Python's can fork its workers' zygote
    # (foundation.meta_schedule.forked_workers). A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        # Before anything else registers an exit handler, so that it runs after all of them.
        from foundation.processes.heap import freeze_at_exit

        freeze_at_exit()
        from farm.cli.app import main as run
    except KeyboardInterrupt:
        hint = "nothing had started"
        if "--json" in sys.argv[1:]:
            sys.stdout.write(json.dumps({"error": "interrupted", "hint": hint, "exit_code": EXIT_INTERRUPTED}) + "\n")
        sys.stderr.write(f"error: interrupted ({hint})\n")
        sys.exit(EXIT_INTERRUPTED)
    run()
