"""Python's cyclic garbage collector, kept from stalling the coordinator's event loop.

Measured with a thousand agents (bench/coordinator_scale.py, docs/benchmarks.md): every full
collection holds the GIL while it walks every tracked object, and every call in flight
waits. Two causes, two remedies:

- The coordinator holds TVM, Relax and the models it planned: ~155,000 objects from the
  imports alone, which never die. Full collections took 130-180 ms, every ~10 s. After
  start-up and after each plan or build, what is alive is frozen (`gc.freeze`):
  collections skip it, and reference counting still frees whatever of it is let go.
- A call's objects live from milliseconds to seconds (a report waits for its group's
  commit). With the default thresholds (a young collection every 700 allocations, every
  few milliseconds under load) they reached the old generation before they died: full
  collections of 70-100 ms came every ~3 s even with the long-lived objects frozen. With
  a young generation of 50,000 allocations they die young: full collections in the
  measured window came once or twice, of ~20 ms.
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
