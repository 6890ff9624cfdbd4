"""Python's cyclic garbage collector in the farm's long-lived and forking processes.

A collection walks every object it tracks, and a process that has imported TVM and Relax and
loaded a model tracks ~200,000 of them. So:

- `freeze_long_lived`, once what a process keeps for good is alive (TVM imported, a model's tasks
  made, a plan or a build done): what is alive then is exempt from later collections; reference
  counting still frees whatever of it is let go. Before a fork it also keeps the children from
  writing to every inherited page when they collect (copy-on-write: each worker forked from the
  zygote walked, and so copied, the zygote's whole heap).
- `tune_collector`: a young generation of THRESHOLDS[0] allocations, so that a call's objects
  (alive for milliseconds to seconds) die young instead of reaching the old generation.
- `freeze_at_exit`: the heap frozen as the process ends. Python's finalization runs full
  collections as it tears the modules down, each a walk of every tracked object, to find
  cycles the operating system is about to free with the process anyway: 0.6-0.8 CPU-s of a
  `farm submit` that tuned a small model (230,000 objects), 0.03-0.05 frozen.

What each was measured to give: docs/benchmarks.md, "Why the fleet path exists" (the
coordinator), "The garbage collector in tuning processes" and, for the freeze at exit, "The test
suite's time" (2026-12-01).
"""

from __future__ import annotations

import atexit
import functools
import gc

# Allocations between young collections, then young collections between middle ones, and
# middle ones between full ones (gc.set_threshold). Python's default is (700, 10, 10).
THRESHOLDS = (50_000, 20, 10)


def tune_collector() -> None:
    gc.set_threshold(*THRESHOLDS)


def freeze_long_lived() -> None:
    """Collect what is garbage now, then exempt everything still alive from later collections."""
    gc.collect()
    gc.freeze()


@functools.cache  # once per process
def freeze_at_exit() -> None:
    """Freeze the heap once the process has begun to exit (the last of its exit handlers if
    called before the others are registered: they all run first), so that finalization's
    collections skip it. Reference counting still frees what the modules' teardown lets go;
    only cyclic garbage is left, to the operating system."""
    atexit.register(gc.freeze)
