"""Python's cyclic garbage collector, kept from stalling the coordinator's event loop.

A collection holds the GIL while it walks what it tracks, and every call in flight waits. So:

- `freeze_long_lived`, after start-up and after each plan or build: what is alive then (TVM,
  Relax, the models planned) is exempt from later collections; reference counting still
  frees whatever of it is let go.
- `tune_collector`: a young generation of THRESHOLDS[0] allocations, so that a call's objects
  (alive for milliseconds to seconds) die young instead of reaching the old generation.
- `PacedCollector`: the serving process collects on its event loop, a little at a time (the
  young generation every PACE_S, the middle one and all of it every MIDDLE_EVERY and
  FULL_EVERY passes); the thresholds stay as a backstop for a loop that is held up.

What each was measured to give: docs/benchmarks.md, "Why the fleet path exists".
"""

from __future__ import annotations

import asyncio
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


# The serving loop's collection passes (PacedCollector): seconds between young passes, and
# young passes per middle and per full one.
PACE_S = 0.05
MIDDLE_EVERY = 20
FULL_EVERY = 1200


class PacedCollector:
    """Collects from ``loop``, between its callbacks: short passes often instead of long ones
    when an allocation count says so. Start and stop it from the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pace_s: float = PACE_S,
                 middle_every: int = MIDDLE_EVERY, full_every: int = FULL_EVERY):
        self._loop = loop
        self._pace_s = pace_s
        self._middle_every = middle_every
        self._full_every = full_every
        self.passes = 0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._handle = self._loop.call_later(self._pace_s, self._collect)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _collect(self) -> None:
        self.passes += 1
        if self.passes % self._full_every == 0:
            gc.collect(2)
        elif self.passes % self._middle_every == 0:
            gc.collect(1)
        else:
            gc.collect(0)
        self._handle = self._loop.call_later(self._pace_s, self._collect)
