"""Building and timing candidates: warm builder/runner pools, local or through a tracker."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from foundation.config import MIN_REPEAT_MS_ENV, TIMING_CONTEXT_ENV, cpu_cache_flush
from foundation.domain.timing_context import TaskTiming, TimingContext
from foundation.errors import BadInput
from foundation.hardware.tvm_startup import LeanWorkerInit
from foundation.meta_schedule.warm_builder import prewarm

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.meta_schedule.progress import LiveProgress

log = logging.getLogger(__name__)

# MetaSchedule's builders and runners, and the farm's builder, report a timed-out candidate as
# "<who>: Timeout, killed after N seconds".
_TIMEOUT = re.compile(r"\btimeout, killed after\b", re.IGNORECASE)


def trial_outcome(stage: str, error_msg: str | None) -> str:
    """What became of one candidate: ok, build_error, run_error or timeout (``stage`` is
    "build" or "run"; a candidate that built is only ok once it ran)."""
    if not error_msg:
        return "ok"
    if _TIMEOUT.search(error_msg):
        return "timeout"
    return f"{stage}_error"


class MeasureObserver(Protocol):
    """Told of every batch of candidates built and every batch measured, with the wall time it
    took (an agent's metrics). ``results`` are MetaSchedule's BuilderResults / RunnerResults."""

    def built(self, target_kind: str, results: Sequence, seconds: float) -> None: ...

    def measured(self, target_kind: str, results: Sequence, seconds: float) -> None: ...


@dataclass(frozen=True)
class RPCMeasure:
    """Measure through a TVM RPC tracker on any free server registered under ``key``."""

    tracker_host: str
    tracker_port: int
    key: str
    session_timeout_sec: float = 60.0
    max_workers: int = 1


# Timed with the caches flushed, a CPU candidate runs once a repeat, this many repeats.
CACHE_FLUSH_REPEATS = 10
DEFAULT_MIN_REPEAT_MS = 40
MAX_MIN_REPEAT_MS = 60_000


def min_repeat_ms_setting() -> int:
    """How long a candidate's calls repeat for one timing: MIN_REPEAT_MS_ENV, else 40 ms."""
    raw = os.environ.get(MIN_REPEAT_MS_ENV, "").strip()
    if not raw:
        return DEFAULT_MIN_REPEAT_MS
    if not re.fullmatch(r"[0-9]{1,6}", raw) or int(raw) > MAX_MIN_REPEAT_MS:
        name, default = MIN_REPEAT_MS_ENV, DEFAULT_MIN_REPEAT_MS
        raise BadInput(f"{name}={raw!r} is not a whole number of milliseconds from 0 to {MAX_MIN_REPEAT_MS}",
                       f"set it to e.g. {name}={default}, or unset it for {default}")
    return int(raw)


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed. ``rpc`` is None for the local device.

    ``timing_context``: the cache state a CPU candidate is timed in (foundation.domain.timing_context):
    calls back to back for ``min_repeat_ms`` with everything cached (warm), or one call a repeat after
    a flush of its weights (weights), of every argument but the first (flushed), of everything with
    the activations read back (producer), or per task by its weights against ``l2_kib`` (auto; None:
    this box's fingerprint's). Unset: TIMING_CONTEXT_ENV, else flushed where ``cache_flush``
    (FARM_CPU_CACHE_FLUSH, its older spelling), else None: the one the shipped pack of
    ``fingerprint_id`` (None: this box's) chose by its A/B, else warm, decided as a tuning run starts.

    ``zygote_forked_here``: the workers' zygote is a fork of this process, started as the pools are
    (forked_workers.fork_zygote_here), for a process whose every thread its caller knows: the
    `farm submit` command's, not a library caller's."""

    build_workers: int | None = None
    build_timeout_sec: float = 120.0
    run_timeout_sec: float = 60.0
    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = field(default_factory=min_repeat_ms_setting)
    rpc: RPCMeasure | None = None
    cache_flush: bool = field(default_factory=cpu_cache_flush)
    zygote_forked_here: bool = False
    timing_context: TimingContext | None = None
    l2_kib: int | None = None
    fingerprint_id: str | None = None

    def __post_init__(self) -> None:
        if self.timing_context is None:
            from foundation.meta_schedule.timing_context import timing_context_setting

            context = timing_context_setting() if os.environ.get(TIMING_CONTEXT_ENV, "").strip() else (
                TimingContext.FLUSHED if self.cache_flush else None)
            object.__setattr__(self, "timing_context", context)
        elif not isinstance(self.timing_context, TimingContext):
            object.__setattr__(self, "timing_context", TimingContext(self.timing_context))

    def evaluator_config(self, target_kind: str, context: TimingContext | None = None):
        """MetaSchedule's EvaluatorConfig for candidates of ``target_kind`` timed in ``context``
        (default: the settings'; auto's tasks say their own)."""
        from tvm.s_tir import meta_schedule as ms

        context = context or self.timing_context
        if target_kind == "llvm" and context is not None and context.flushes:
            return ms.runner.EvaluatorConfig(number=1, repeat=CACHE_FLUSH_REPEATS, min_repeat_ms=0,
                                             enable_cpu_cache_flush=context is TimingContext.FLUSHED)
        return ms.runner.EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                         enable_cpu_cache_flush=False)


class BuildClock:
    """Counts builds and remembers when the first candidate of this process was built.

    The farm's start-up goal is measured from here (bench/startup.py), and the counts are
    what an agent exports as metrics.
    """

    def __init__(self) -> None:
        self.first_build_at: float | None = None  # wall clock (time.time()) of the first result
        self.built = 0
        self.failed = 0

    def record(self, results) -> None:
        if self.first_build_at is None and results:
            self.first_build_at = time.time()
        for result in results:
            if result.error_msg:
                self.failed += 1
            else:
                self.built += 1


def timed_builder(inner, clock: BuildClock, pools: "WorkerPools | None" = None, target_kind: str = ""):
    """Wrap a MetaSchedule builder: record every batch on ``clock``, on live progress and with
    the pools' observer."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder

    @derived_object
    class _TimedBuilder(PyBuilder):
        def shutdown(self) -> None:
            inner.shutdown()

        def build(self, build_inputs):
            begin = time.monotonic()
            results = inner.build(build_inputs)
            clock.record(results)
            if pools is not None and pools.live is not None:
                pools.live.built(results)
            if pools is not None and pools.observer is not None:
                pools.observer.built(target_kind, results, time.monotonic() - begin)
            return results

    return _TimedBuilder()


def observed_runner(inner, pools: "WorkerPools", target_kind: str = ""):
    """Wrap a MetaSchedule runner so each result reaches live progress as soon as it exists,
    and each whole batch the pools' observer.

    LocalRunner measures synchronously (its futures are done on return); RPCRunner's futures
    complete later, so a callback reports them.
    """
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner

    @derived_object
    class _ObservedRunner(PyRunner):
        def shutdown(self) -> None:
            inner.pool.shutdown()

        def run(self, runner_inputs):
            live = pools.live
            begin = time.monotonic()
            task_id = live.current if live is not None else None
            pools.time_in_context(inner, target_kind, task_id)
            futures = inner.run(runner_inputs)
            batch = _MeasuredBatch(len(futures), target_kind, pools.observer, begin, live, task_id)
            for future in futures:
                _report_when_done(future, live, task_id, batch)
            return futures

    return _ObservedRunner()


class _MeasuredBatch:
    """Collects a batch's results as they complete; tells the observer and live progress once
    all have."""

    def __init__(self, size: int, target_kind: str, observer: MeasureObserver | None, begin: float,
                 live: "LiveProgress | None", task_id: int | None):
        self.results: list = []
        self.size, self.target_kind, self.observer, self.begin = size, target_kind, observer, begin
        self.live, self.task_id = live, task_id
        self._lock = threading.Lock()

    def done(self, result) -> None:
        with self._lock:
            self.results.append(result)
            complete = len(self.results) == self.size
        if not complete:
            return
        if self.observer is not None:
            self.observer.measured(self.target_kind, self.results, time.monotonic() - self.begin)
        if self.live is not None:
            self.live.batch_measured(self.task_id)


def _report_when_done(future, live: "LiveProgress | None", task_id: int | None, batch: _MeasuredBatch) -> None:
    def report(result) -> None:
        if live is not None:
            live.ran(task_id, result)
        batch.done(result)

    pending = getattr(future, "future", None)  # RPCRunnerFuture wraps a concurrent future
    if pending is not None and not pending.done():
        pending.add_done_callback(lambda _: report(future.result()))
    else:
        report(future.result())


class WorkerPools:
    """Builder and runner pools that stay warm across tuning runs of one process.

    A fresh worker pays TVM's import; reusing the pools across shards means an agent pays
    it once. Pools are per target kind because the lean intrinsic set differs. `close()`
    stops their processes; left to garbage collection, TVM's pool joins its threads from
    whichever thread collects it, and fails ("cannot join current thread").
    """

    def __init__(self, settings: MeasureSettings | None = None, observer: MeasureObserver | None = None):
        self.settings = settings or MeasureSettings()
        self.clock = BuildClock()
        self.observer = observer
        self.live: LiveProgress | None = None  # set by the tuning run in progress
        # Each task's timing context, by task index, while a tuning run is in progress (plan_timings).
        self.timings: list[TaskTiming] | None = None
        self._pools: dict[str, tuple[object, object]] = {}

    def plan_timings(self, mods: Sequence["tvm.IRModule"], target_kind: str) -> list[TaskTiming] | None:
        """Each task's timing context for a tuning run of ``mods`` (its tasks' workloads), kept until
        the run ends (``timings = None``); None where every task is timed warm, or on a GPU. With no
        context asked for, the one this fingerprint's shipped pack chose (logged)."""
        from foundation.meta_schedule.timing_context import hardware_timing_context, l2_kib_here, task_timings

        context = self.settings.timing_context
        if target_kind == "llvm" and context is None:
            chosen = hardware_timing_context(self.settings.fingerprint_id)
            log.info("CPU candidates timed %s: %s", chosen.context.value, chosen.why)
            context = chosen.context
        if target_kind != "llvm" or context in (None, TimingContext.WARM):
            self.timings = None
            return None
        l2_kib = self.settings.l2_kib
        if context.sized_by_l2 and l2_kib is None:
            l2_kib = l2_kib_here()
        self.timings = task_timings(mods, context, l2_kib)
        return self.timings

    def time_in_context(self, runner, target_kind: str, task_id: int | None) -> None:
        """Set ``runner`` (TVM's LocalRunner or RPCRunner) to time the next candidates of task
        ``task_id`` in its context: the evaluator and its config travel with each candidate."""
        if self.timings is None or target_kind != "llvm":
            return
        from foundation.meta_schedule.timing_context import evaluator_for

        timing = self.timings[task_id] if task_id is not None and 0 <= task_id < len(self.timings) else None
        context = timing.context if timing is not None else TimingContext.WARM
        runner.evaluator_config = self.settings.evaluator_config(target_kind, context)
        runner.f_run_evaluator = evaluator_for(timing)

    def get(self, target_kind: str):
        if target_kind not in self._pools:
            if self.settings.zygote_forked_here:  # before the pools' threads start
                from foundation.meta_schedule.forked_workers import fork_zygote_here

                fork_zygote_here(target_kind)
            # The pools' threads are started here (prewarm), and start the worker processes:
            # with SIGINT and SIGTERM blocked, the workers inherit the mask, so a Ctrl-C sent
            # to the terminal's process group reaches the farm process (which stops tuning
            # cleanly), not a worker in the middle of a build.
            masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                self._pools[target_kind] = (self._builder(target_kind), self._runner(target_kind))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, masked)
        return self._pools[target_kind]

    def close(self) -> None:
        """Stop every worker process; the pools start afresh if used again. After tuning, so
        that timing a library competes with no idle worker for the box (bench/quiet_timing.py)."""
        pools, self._pools = self._pools, {}
        for builder, runner in pools.values():
            builder.shutdown()
            runner.shutdown()

    def __enter__(self) -> "WorkerPools":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _builder(self, target_kind: str):
        from foundation.meta_schedule.warm_builder import warm_builder

        warm = warm_builder(self.settings.build_workers, self.settings.build_timeout_sec,
                            LeanWorkerInit(target_kind))
        return timed_builder(warm, self.clock, self, target_kind)

    def _runner(self, target_kind: str):
        from tvm.s_tir import meta_schedule as ms

        from foundation.meta_schedule.forked_workers import runner_on_forked_workers

        s = self.settings
        evaluator = s.evaluator_config(target_kind)
        if s.rpc is None:
            inner = runner_on_forked_workers(
                ms.runner.LocalRunner, target_kind,
                timeout_sec=s.run_timeout_sec,
                evaluator_config=evaluator,
                initializer=LeanWorkerInit(target_kind),
            )
        else:
            rpc_config = ms.runner.RPCConfig(
                tracker_host=s.rpc.tracker_host,
                tracker_port=s.rpc.tracker_port,
                tracker_key=s.rpc.key,
                session_timeout_sec=s.rpc.session_timeout_sec,
            )
            inner = runner_on_forked_workers(
                ms.runner.RPCRunner, target_kind,
                rpc_config=rpc_config,
                evaluator_config=evaluator,
                max_workers=s.rpc.max_workers,
                initializer=LeanWorkerInit(target_kind),
            )
        # The runner's pool persists; its workers start now, while the tuner makes its first candidates.
        prewarm(inner.pool, s.rpc.max_workers if s.rpc else 1, "farm-runner-prewarm")
        return observed_runner(inner, self, target_kind)
