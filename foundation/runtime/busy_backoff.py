"""One thread while other work holds the cores, for a library that `auto` runs on every core.

TVM's pool waits at the end of every parallel region for each of its threads; when other
processes hold the cores, each wait lasts until the scheduler runs a descheduled thread again.
bert-tiny b1, 1.25 ms on 2 threads of a quiet box, ran 214-248 ms with both cores busy, and
2.2-6.1 ms on one thread (docs/benchmarks.md, "A millisecond model, and auto's choice made by
timing"). Which the box will be is only known call by call, so a library loaded with `auto` on
every core watches its calls: SLOW_IN_A_ROW calls each BUSY_SLOWDOWN times the latency its
validation stored mean the cores are taken (one such call is a stray pause: a quiet box has
them), and it runs on one thread for a while, then tries every core again, waiting twice as long
each time that try is slow too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A call on every core this many times its stored (quiet) latency: the cores are taken.
BUSY_SLOWDOWN = 4.0
SLOW_IN_A_ROW = 3
# How long the first step back to one thread lasts; each slow try on every core doubles it, up to
# the most: a try costs one collapsed call (about 200 ms for bert-tiny), at most once this often.
FIRST_BACKOFF_S = 1.0
MOST_BACKOFF_S = 60.0


class BusyBackoff:
    """The thread count of each call of a library stored at ``stored_latency_ms`` on every core."""

    def __init__(self, cores: int, stored_latency_ms: float, clock: Callable[[], float] = time.monotonic):
        self.cores = cores
        self.slow_ms = stored_latency_ms * BUSY_SLOWDOWN
        self.clock = clock
        self.backoff_s = FIRST_BACKOFF_S
        self.serial_until: float | None = None  # on one thread until then
        self.warm = False  # a library's first call allocates and loads: slow on any box
        self.slow_calls = 0  # in a row, on every core

    def threads(self) -> int:
        """How many threads the next call runs on."""
        return 1 if self.serial_until is not None and self.clock() < self.serial_until else self.cores

    def ran(self, threads: int, ms: float) -> None:
        """A call on ``threads`` took ``ms``."""
        if not self.warm:
            self.warm = True
            return
        if threads != self.cores:
            return
        if ms <= self.slow_ms:
            self.backoff_s, self.serial_until, self.slow_calls = FIRST_BACKOFF_S, None, 0
            return
        self.slow_calls += 1
        if self.serial_until is not None:  # a try after a step back: the cores are still taken
            self.backoff_s = min(MOST_BACKOFF_S, self.backoff_s * 2)
        elif self.slow_calls < SLOW_IN_A_ROW:
            return
        self.serial_until = self.clock() + self.backoff_s
