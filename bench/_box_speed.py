"""How fast this box runs Python at the moment, for benchmarks to print beside their figures.

The same machine kind was up to three times slower at some hours than at others (planning the
same jobs took 39-180 s in bench/coordinator_scale.py), which moves every figure a benchmark
prints; this one says which kind of hour a run had.
"""

from __future__ import annotations

import time


def reference_loop_ms() -> float:
    """The best of three runs of a fixed pure-Python loop (two million additions), in ms."""
    best = float("inf")
    for _ in range(3):
        begin = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.perf_counter() - begin)
    return 1000 * best
