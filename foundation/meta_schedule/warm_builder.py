"""A MetaSchedule builder whose worker processes stay warm across batches.

TVM's LocalBuilder starts a fresh process pool for every batch (to contain a memory leak
in long-lived workers), so each batch of 16 candidates pays every worker's start-up again:
`import tvm` plus the target's intrinsics. The farm keeps one pool and recycles each worker
after a bounded number of builds instead, which contains the leak just as well, and starts
the workers in the background as soon as the builder exists. Each candidate is built as
LocalBuilder builds it and exported as a shared library linked by `ld` alone
(foundation.meta_schedule.candidate_export).
"""

from __future__ import annotations

import logging
import threading

# Builds a worker serves before it is replaced: bounds the leak LocalBuilder worries about.
BUILDS_PER_WORKER = 200


def _ready() -> bool:
    return True


def prewarm(pool, workers: int, name: str) -> None:
    """Start every worker of a TVM PopenPoolExecutor (running its initializer) in the background.

    One no-op per pool thread reaches each worker while the tuner is still generating its
    first candidates; a worker that fails to start fails its first real task too. Starting
    ahead is only a head start: where the process limit leaves no thread for it, it is skipped
    with a warning, and the workers start with the first builds (or fail them, saying why).
    """

    def start_all() -> None:
        try:
            futures = [pool.submit(_ready) for _ in range(workers)]
        except RuntimeError as err:  # the pool's threads could not start
            _skipped(name, err)
            return
        for future in futures:
            try:
                future.result()
            except Exception:
                pass

    try:
        threading.Thread(target=start_all, name=name, daemon=True).start()
    except RuntimeError as err:
        _skipped(name, err)


def _skipped(name: str, err: RuntimeError) -> None:
    logging.getLogger(__name__).warning("%s skipped: %s (the process limit, `ulimit -u`, was reached); "
                                        "the workers start with the first builds", name, err)


def warm_builder(max_workers: int | None, timeout_sec: float, initializer):
    """A PyBuilder building candidates the way LocalBuilder does, on a persistent pool."""
    import os

    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
    from tvm.support.popen_pool import StatusKind

    from foundation.meta_schedule.candidate_export import export_candidate
    from foundation.meta_schedule.forked_workers import worker_pool

    workers = max_workers or os.cpu_count() or 1
    pool = worker_pool(
        initializer.target_kind,
        max_workers=workers,
        timeout=timeout_sec,
        initializer=initializer,
        maximum_process_uses=BUILDS_PER_WORKER,
    )

    prewarm(pool, workers, "farm-builder-prewarm")

    @derived_object
    class _WarmBuilder(PyBuilder):
        def build(self, build_inputs):
            results = []
            jobs = [
                (None, export_candidate, b.mod, b.target, _serialize_params(b.params)) for b in build_inputs
            ]
            for outcome in pool.map_with_error_catching(lambda job: _worker_func(*job), jobs):
                if outcome.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(outcome.value, None))
                elif outcome.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"farm builder: timeout, killed after {timeout_sec} seconds"))
                else:
                    results.append(BuilderResult(None, f"farm builder: an exception occurred\n{outcome.value}"))
            return results

        def shutdown(self) -> None:
            pool.shutdown()

    builder = _WarmBuilder()
    builder.pool = pool  # for inspection (tests, metrics)
    return builder
