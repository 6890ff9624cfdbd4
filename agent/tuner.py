"""Tune a set of tasks with MetaSchedule (evolutionary search, xgb cost model) into a database.

The database is the farm's registry, so the search starts from every record the farm already
has for these workloads on this fingerprint (MetaSchedule seeds its population from
``get_top_k``), and every measured candidate reaches the registry as it is measured.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from agent.tvm_startup import LeanWorkerInit, install_lean_tensor_intrinsics

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from coordinator.compile import TuningTask


@dataclass(frozen=True)
class TuningBudget:
    """How many candidates to measure: in all, per task, and per search round."""

    max_trials_global: int
    max_trials_per_task: int
    num_trials_per_iter: int = 16

    @staticmethod
    def for_tasks(num_tasks: int, trials: int | None, trials_per_task: int | None) -> "TuningBudget":
        """A budget from the user's options; the global budget defaults to per-task x tasks."""
        per_task = trials_per_task or 32
        total = trials if trials is not None else per_task * max(num_tasks, 1)
        per_task = min(per_task, total) if trials_per_task is None else per_task
        return TuningBudget(
            max_trials_global=total,
            max_trials_per_task=per_task,
            num_trials_per_iter=max(1, min(16, per_task)),
        )


@dataclass(frozen=True)
class MeasureSettings:
    """How candidates are built and timed. ``rpc`` is None for the local device."""

    build_workers: int | None = None
    build_timeout_sec: float = 120.0
    run_timeout_sec: float = 60.0
    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 40
    rpc: "RPCMeasure | None" = None


@dataclass(frozen=True)
class RPCMeasure:
    """Measure through a TVM RPC tracker on any free server registered under ``key``."""

    tracker_host: str
    tracker_port: int
    key: str
    session_timeout_sec: float = 60.0
    max_workers: int = 1


@dataclass
class TaskProgress:
    """What is known about one task while it is tuned."""

    index: int
    name: str
    weight: int
    flop: float
    budget: int
    trials: int = 0
    build_errors: int = 0
    run_errors: int = 0
    best_sec: float | None = None
    started: float | None = None
    last_update: float | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def best_gflops(self) -> float | None:
        if self.best_sec is None or self.best_sec <= 0 or self.flop <= 0:
            return None
        return self.flop / self.best_sec / 1e9

    @property
    def elapsed(self) -> float:
        if self.started is None:
            return 0.0
        return (self.last_update or time.monotonic()) - self.started

    def to_json(self) -> dict:
        return {
            "task": self.name,
            "weight": self.weight,
            "trials": self.trials,
            "budget": self.budget,
            "build_errors": self.build_errors,
            "run_errors": self.run_errors,
            "best_us": None if self.best_sec is None else self.best_sec * 1e6,
            "best_gflops": self.best_gflops,
            "elapsed_s": round(self.elapsed, 3),
        }


class ProgressListener(Protocol):
    """Receives tuning progress; implementations draw bars, stream events, count metrics."""

    def started(self, tasks: Sequence[TaskProgress]) -> None: ...

    def measured(self, task: TaskProgress, new_trials: int) -> None: ...

    def finished(self, tasks: Sequence[TaskProgress]) -> None: ...


@dataclass
class TuningReport:
    """The outcome of one tuning run."""

    tasks: list[TaskProgress]
    seconds: float
    cancelled: bool = False
    first_build_at: float | None = None  # wall clock of this process's first built candidate

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def errors(self) -> int:
        return sum(t.build_errors + t.run_errors for t in self.tasks)


# Errors kept per task in the report: enough to diagnose, bounded for huge runs.
_KEPT_ERRORS_PER_TASK = 5


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


def timed_builder(inner, clock: BuildClock):
    """Wrap a MetaSchedule builder so every batch it returns is recorded on ``clock``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder

    @derived_object
    class _TimedBuilder(PyBuilder):
        def build(self, build_inputs):
            results = inner.build(build_inputs)
            clock.record(results)
            return results

    return _TimedBuilder()


class WorkerPools:
    """Builder and runner pools that stay warm across tuning runs of one process.

    A fresh worker pays TVM's import; reusing the pools across shards means an agent pays
    it once. Pools are per target kind because the lean intrinsic set differs.
    """

    def __init__(self, settings: MeasureSettings | None = None):
        self.settings = settings or MeasureSettings()
        self.clock = BuildClock()
        self._pools: dict[str, tuple[object, object]] = {}

    def get(self, target_kind: str):
        if target_kind not in self._pools:
            self._pools[target_kind] = (self._builder(target_kind), self._runner(target_kind))
        return self._pools[target_kind]

    def _builder(self, target_kind: str):
        from tvm.s_tir import meta_schedule as ms

        local = ms.builder.LocalBuilder(
            max_workers=self.settings.build_workers,
            timeout_sec=self.settings.build_timeout_sec,
            initializer=LeanWorkerInit(target_kind),
        )
        return timed_builder(local, self.clock)

    def _runner(self, target_kind: str):
        from tvm.s_tir import meta_schedule as ms

        s = self.settings
        evaluator = ms.runner.EvaluatorConfig(
            number=s.number,
            repeat=s.repeat,
            min_repeat_ms=s.min_repeat_ms,
            enable_cpu_cache_flush=False,
        )
        if s.rpc is None:
            return ms.runner.LocalRunner(
                timeout_sec=s.run_timeout_sec,
                evaluator_config=evaluator,
                initializer=LeanWorkerInit(target_kind),
            )
        rpc_config = ms.runner.RPCConfig(
            tracker_host=s.rpc.tracker_host,
            tracker_port=s.rpc.tracker_port,
            tracker_key=s.rpc.key,
            session_timeout_sec=s.rpc.session_timeout_sec,
        )
        return ms.runner.RPCRunner(
            rpc_config=rpc_config,
            evaluator_config=evaluator,
            max_workers=s.rpc.max_workers,
            initializer=LeanWorkerInit(target_kind),
        )


def tune(
    tasks: Sequence["TuningTask"],
    target: "tvm.target.Target",
    database,
    budget: TuningBudget,
    work_dir: Path,
    *,
    pools: WorkerPools | None = None,
    listener: ProgressListener | None = None,
    cancelled: threading.Event | None = None,
    seed: int | None = None,
) -> TuningReport:
    """Tune ``tasks`` for ``target``; records go to ``database`` as they are measured.

    ``cancelled`` is checked after every measured batch; when set, the remaining tasks are
    terminated and the report says so. MetaSchedule's own log goes to ``work_dir/logs``.
    """
    target_kind = target.kind.name
    install_lean_tensor_intrinsics(target_kind)
    from tvm.s_tir import meta_schedule as ms

    pools = pools or WorkerPools()
    builder, runner = pools.get(target_kind)
    work_dir.mkdir(parents=True, exist_ok=True)
    progress = [
        TaskProgress(
            index=i,
            name=t.name,
            weight=t.weight,
            flop=t.flop,
            budget=budget.max_trials_per_task,
        )
        for i, t in enumerate(tasks)
    ]
    contexts = _tune_contexts(tasks, target, work_dir, seed)
    callback = _ProgressCallback(progress, listener, cancelled)
    begin = time.monotonic()
    for task in progress:
        task.started = begin
    if listener:
        listener.started(progress)
    try:
        ms.tune_tasks(
            tasks=contexts,
            task_weights=[float(t.weight) for t in tasks],
            work_dir=str(work_dir),
            max_trials_global=budget.max_trials_global,
            max_trials_per_task=budget.max_trials_per_task,
            num_trials_per_iter=budget.num_trials_per_iter,
            builder=builder,
            runner=runner,
            database=database,
            cost_model="xgb",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), callback.tvm_object],
            task_scheduler="gradient",
        )
    finally:
        if hasattr(database, "flush"):
            database.flush()
        if listener:
            listener.finished(progress)
    return TuningReport(
        tasks=progress,
        seconds=time.monotonic() - begin,
        cancelled=callback.was_cancelled,
        first_build_at=pools.clock.first_build_at,
    )


def _tune_contexts(tasks, target, work_dir: Path, seed: int | None):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    loggers = _task_loggers(work_dir, [t.name for t in tasks])
    seeds = fork_seed(seed, n=len(tasks))
    return [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy="evolutionary",
            task_name=task.name,
            logger=logger,
            rand_state=rand_state,
            num_threads="physical",
        )
        for task, logger, rand_state in zip(tasks, loggers, seeds)
    ]


def _task_loggers(work_dir: Path, task_names: list[str]) -> list[logging.Logger]:
    """MetaSchedule's per-task log files under work_dir/logs, with its console handler
    replaced by a null one: stdout belongs to `--json`, and the farm draws its own progress."""
    from tvm.s_tir.meta_schedule.logging import create_loggers

    log_dir = work_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    width = len(str(max(len(task_names) - 1, 0)))
    names = [f"tvm.s_tir.meta_schedule.task_{i:0{width}d}_{name[:100]}" for i, name in enumerate(task_names)]
    create_loggers(
        log_dir=str(log_dir),
        params=[{"log_dir": str(log_dir), "logger_name": name} for name in names],
        logger_config={"handlers": {"tvm.s_tir.meta_schedule.console": {"class": "logging.NullHandler"}}},
    )
    return [logging.getLogger(name) for name in names]


class _ProgressCallback:
    """A MetaSchedule measure callback that turns measured batches into TaskProgress."""

    def __init__(self, progress, listener, cancelled):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        self.progress = progress
        self.listener = listener
        self.cancelled = cancelled
        self.was_cancelled = False
        owner = self

        @derived_object
        class _Callback(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
                owner.apply(task_scheduler, task_id, builder_results, runner_results)

        self.tvm_object = _Callback()

    def apply(self, task_scheduler, task_id, builder_results, runner_results) -> None:
        task = self.progress[task_id]
        now = time.monotonic()
        new_trials = len(runner_results)
        task.trials += new_trials
        for built, ran in zip(builder_results, runner_results):
            if built.error_msg:
                task.build_errors += 1
                self._keep(task, built.error_msg)
            elif ran.error_msg:
                task.run_errors += 1
                self._keep(task, ran.error_msg)
            elif ran.run_secs:
                mean = sum(float(s) for s in ran.run_secs) / len(ran.run_secs)
                if math.isfinite(mean) and (task.best_sec is None or mean < task.best_sec):
                    task.best_sec = mean
        task.last_update = now
        if self.listener:
            self.listener.measured(task, new_trials)
        if self.cancelled is not None and self.cancelled.is_set() and not self.was_cancelled:
            self.was_cancelled = True
            for i in range(len(self.progress)):
                task_scheduler.terminate_task(i)

    @staticmethod
    def _keep(task: TaskProgress, message: str) -> None:
        if len(task.errors) < _KEPT_ERRORS_PER_TASK:
            task.errors.append(message.strip().splitlines()[-1][:500] if message.strip() else message)

