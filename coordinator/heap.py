"""Python's cyclic garbage collector, kept from stalling the coordinator's event loop.

A collection holds the GIL while it walks what it tracks, and every call in flight waits. The
coordinator freezes what it keeps after start-up and after each plan or build, and keeps a
large young generation (foundation.processes.heap); on top of that, `PacedCollector`: the
serving process collects on its event loop, a little at a time (the young generation every
PACE_S, the middle one and all of it every MIDDLE_EVERY and FULL_EVERY passes); the thresholds
stay as a backstop for a loop that is held up.

What each was measured to give: docs/benchmarks.md, "Why the fleet path exists".
"""

from __future__ import annotations

import asyncio
import gc

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
