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

That left young collections of 30-160 ms every ~10 s on slower CPUs (~45,000 objects each,
~90% of them garbage in cycles: grpc.aio's lookup of each call's handler leaves a closure
cycle behind). The serving process therefore collects on its event loop, a little at a time
(`PacedCollector`): the young generation every 50 ms, the middle one every second, all of
it every minute; the thresholds above stay as a backstop for a loop that is held up.
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
