"""How many threads a loaded library runs its kernels on.

TVM's runtime pool pins one thread per core and, at the end of every parallel region, waits
for all of them. Where other work holds the cores, each wait lasts until the scheduler gives a
pinned thread its core back: a model of microsecond kernels ran at 20 ms instead of 0.03 ms
beside two CPU-bound processes on a 2-core box, while on one thread it ran as fast as quiet
(docs/benchmarks.md, "Latency when the cores are shared"). A model of millisecond kernels
amortises the wait and needs every core. So by default ("auto") a library whose validated
latency is under SERIAL_BELOW_MS runs on one thread and any other on every core this process
may use; a number asks for exactly that many.
"""

from __future__ import annotations

from foundation.errors import BadInput

AUTO = "auto"
# The stored latency (validation's median, taken on every core of a quiet box) under which a
# library runs serially: its kernels are microseconds long, where a barrier waiting for a
# descheduled thread costs more than a second thread can save.
SERIAL_BELOW_MS = 1.0
MAX_THREADS = 1024


def parse_threads(value: int | str | None) -> int | str:
    """``auto`` (also None) or a thread count from 1 to MAX_THREADS; anything else is bad input."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return AUTO
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"threads must be 'auto' or a whole number, not {str(value)[:40]!r}",
                       "pass --threads auto, or a count such as --threads 1") from None
    if not 1 <= count <= MAX_THREADS:
        raise BadInput(f"threads must be from 1 to {MAX_THREADS}, not {count}",
                       "pass --threads auto, or a count such as --threads 1")
    return count


def threads_for(requested: int | str | None, stored_latency_ms: float | None, cores: int) -> int:
    """The thread count a library runs on: the one asked for, or auto's choice from the
    latency its validation stored (None: unknown, every core)."""
    choice = parse_threads(requested)
    if choice != AUTO:
        return int(choice)
    if stored_latency_ms is not None and stored_latency_ms < SERIAL_BELOW_MS:
        return 1
    return max(1, cores)


_pool_size: int | None = None  # what use_threads last set in this process (None: TVM's own start)


def use_threads(count: int) -> None:
    """Run this process's TVM thread pool on ``count`` threads from now on. The pool is the
    process's, shared by every library loaded in it: each library asks for its count before it
    runs (LoadedLibrary), and the pool is rebuilt only when the count changes."""
    global _pool_size
    if count == _pool_size:
        return
    import tvm

    # Mode 1 is TVM's kBig: the threads go to the fastest cores, all of them on a uniform CPU,
    # as the pool's own start does. The pool is rebuilt at once; later parallel regions use it.
    tvm.get_global_func("runtime.config_threadpool")(1, count)
    _pool_size = count


def pool_threads() -> int:
    """How many threads this process's TVM pool runs parallel regions on now."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())
