"""The farm's processes keep a large young generation from their first line, and leave their heap
to the operating system at exit (foundation.processes.heap)."""

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


# Cyclic garbage made as the process ends, whose finalizer says so (with os.write, kept by the
# object: the os module may be torn down by then). Python's finalization collects it, unless the
# heap was frozen first.
_GARBAGE_AT_EXIT = """
import os, sys

class Said:
    def __init__(self):
        self.me, self.write = self, os.write
    def __del__(self):
        self.write(1, b"collected at exit\\n")

def make_garbage():
    Said()
"""


def _exit_with_garbage(body: str) -> str:
    script = _GARBAGE_AT_EXIT + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_farm_command_leaves_its_heap_out_of_the_collections_of_its_exit():
    # A plain Python collects the garbage as it finalizes: the check can see a collection.
    assert "collected at exit" in _exit_with_garbage("make_garbage()")
    out = _exit_with_garbage("""
        from farm.cli.launch import main
        sys.argv = ["farm", "--version"]
        try:
            main()
        except SystemExit:
            pass
        make_garbage()
    """)
    assert "farm" in out and "collected at exit" not in out, out


def test_the_heap_is_frozen_after_every_other_exit_handler_and_only_once():
    out = _exit_with_garbage("""
        import atexit, gc
        from foundation.processes.heap import freeze_at_exit
        handlers = atexit._ncallbacks()
        freeze_at_exit()
        freeze_at_exit()
        assert atexit._ncallbacks() == handlers + 1, "registered twice"
        atexit.register(lambda: print("frozen when the handlers ran:", gc.get_freeze_count() > 0, flush=True))
        atexit.register(make_garbage)
    """)
    # A handler registered later runs earlier: it sees nothing frozen yet, and the garbage it made
    # is frozen with the rest.
    assert out.splitlines() == ["frozen when the handlers ran: False"], out
