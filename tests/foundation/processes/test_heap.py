"""The farm's processes keep a large young generation from their first line (foundation.processes.heap)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from foundation.processes.heap import THRESHOLDS, freeze_long_lived


def test_every_farm_command_starts_with_the_farms_thresholds():
    # Set before a command imports TVM: with Python's defaults the import alone ran six full
    # collections of its growing heap.
    script = textwrap.dedent("""
        import gc, sys
        from farm.cli.app import main
        sys.argv = ["farm", "--version"]
        try:
            main()
        except SystemExit:
            pass
        print(gc.get_threshold())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(THRESHOLDS)


def test_what_is_alive_when_frozen_is_left_out_of_later_collections():
    kept = [[] for _ in range(1000)]  # lists: tracked by the collector
    before = gc.get_freeze_count()
    try:
        freeze_long_lived()
        assert gc.get_freeze_count() >= before + len(kept)
    finally:
        gc.unfreeze()
