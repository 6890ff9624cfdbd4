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

What each was measured to give: docs/benchmarks.md, "Why the fleet path exists" (the
coordinator) and "The garbage collector in tuning processes".
"""

from __future__ import annotations

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
