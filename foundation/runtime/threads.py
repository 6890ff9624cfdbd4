"""How many threads a loaded library runs its kernels on.

TVM's runtime pool pins one thread per core and, at the end of every parallel region, waits
for all of them. Where other work holds the cores, each wait lasts until the scheduler gives a
pinned thread its core back: a model of microsecond kernels ran at 20 ms instead of 0.03 ms
beside two CPU-bound processes on a 2-core box, while on one thread it ran as fast as quiet
(docs/benchmarks.md, "Latency when the cores are shared"). A larger model gains from every
core on a quiet box (bert-tiny b1: 1.8x) and still waits at each barrier on a busy one (170x its
quiet time there): no count is right for both, and which the box will be is only known call by
call (foundation.runtime.busy_backoff). So by default ("auto") validation times a library under
SERIAL_BELOW_MS on every core on one thread too, and runs it serially where that costs at most
SERIAL_COSTS_AT_MOST its time on every core (``timed_threads``); the choice is stored with the
library and `farm.load` follows it. A library stored without one runs serially under
SERIAL_BELOW_MS. A number asks for exactly that many.
"""

from __future__ import annotations

import threading

from foundation.errors import BadInput

AUTO = "auto"
# The stored latency (validation's median, taken on every core of a quiet box) under which a
# library runs serially: its kernels are microseconds long, where a barrier waiting for a
# descheduled thread costs more than a second thread can save.
SERIAL_BELOW_MS = 1.0
# How much slower than on every core a library may run on one thread and still be run serially:
# serial is what keeps a small model fast beside other work, but a millisecond model can lose
# half its speed on a quiet box to it (bert-tiny b1 on 2 cores: 1.25 ms, on one 2.2 ms).
SERIAL_COSTS_AT_MOST = 1.5
MAX_THREADS = 1024


def parse_threads(value: int | str | None) -> int | str:
    """``auto`` (also None) or a thread count from 1 to MAX_THREADS; anything else is bad input."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return AUTO
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str)):  # int() would truncate 1.7, count True
            raise TypeError(value)
        count = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"threads must be 'auto' or a whole number, not {str(value)[:40]!r}",
                       "pass --threads auto, or a count such as --threads 1") from None
    if not 1 <= count <= MAX_THREADS:
        raise BadInput(f"threads must be from 1 to {MAX_THREADS}, not {count}",
                       "pass --threads auto, or a count such as --threads 1")
    return count


def timed_threads(every_core_ms: float, one_thread_ms: float | None, cores: int) -> int:
    """Auto's choice for a library timed on every core and (under SERIAL_BELOW_MS) on one thread."""
    if (one_thread_ms is not None and one_thread_ms < SERIAL_BELOW_MS
            and one_thread_ms <= SERIAL_COSTS_AT_MOST * every_core_ms):
        return 1
    return max(1, cores)


def threads_for(requested: int | str | None, stored_latency_ms: float | None, cores: int,
                stored_threads: int | None = None) -> int:
    """The thread count a library runs on: the one asked for, or auto's choice: the one its
    validation made and stored (one thread, or every core), else from the latency it stored
    (None: unknown, every core)."""
    choice = parse_threads(requested)
    if choice != AUTO:
        return int(choice)
    if stored_threads is not None:
        return 1 if stored_threads == 1 else max(1, cores)
    if stored_latency_ms is not None and stored_latency_ms < SERIAL_BELOW_MS:
        return 1
    return max(1, cores)


# What use_threads last set on each thread (none yet: TVM's own start). TVM keeps a pool per
# thread that runs parallel code, each sized on its own: a count set on one thread holds on no other.
_set_here = threading.local()


def use_threads(count: int) -> None:
    """Run the calling thread's TVM thread pool on ``count`` threads from now on. The pool is
    shared by every library the thread runs: each library asks for its count before it runs
    (LoadedLibrary), and the pool is rebuilt only when the count changes."""
    if getattr(_set_here, "count", None) == count:
        return
    import tvm

    # Mode 1 is TVM's kBig: the threads go to the fastest cores, all of them on a uniform CPU,
    # as the pool's own start does. The pool is rebuilt at once; later parallel regions use it.
    tvm.get_global_func("runtime.config_threadpool")(1, count)
    _set_here.count = count
