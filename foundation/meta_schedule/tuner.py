"""Tune a set of tasks with MetaSchedule (evolutionary search, xgb cost model) into a database.

The database is the farm's registry, so the search starts from every record the farm already
has for these workloads on this fingerprint (MetaSchedule seeds its population from
``get_top_k``), and every measured batch is committed to it before the next batch starts
(foundation.meta_schedule.task_scheduler), so a killed tune keeps all but the batch in flight.
A cancel stops the tuning after the batch in flight, whose records are committed too.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
from foundation.meta_schedule.measure import MeasureSettings, RPCMeasure, WorkerPools
from foundation.meta_schedule.progress import LiveProgress, ProgressListener, TaskPickHandler, TaskProgress
from foundation.meta_schedule.task_scheduler import LatencyHistory, joined_gradient
from foundation.processes.native_stderr import native_stderr_to

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.meta_schedule.warm import SeedRoundReport, WarmStart

__all__ = [
    "MeasureSettings", "RPCMeasure", "WorkerPools", "ProgressListener", "TaskProgress",
    "TuningBudget", "TuningReport", "tune",
]

_MS_LOGGER = "tvm.s_tir.meta_schedule"
NATIVE_LOG = "tvm.log"  # in the work directory's logs/, beside MetaSchedule's own
TASK_LIST = "tasks.json"  # in the work directory: the tasks tuned (`_write_task_list`)
DEFAULT_TRIALS_PER_TASK = 32
# From this many trials per task the search keeps MetaSchedule's own population (512); below
# it, sampling and evolving 512 candidates a round (~13 s per task per round on the 2-core
# machines of docs/benchmarks.md) costs more than measuring the few that a small budget picks
# from them.
FULL_POPULATION_FROM = 32
CANDIDATES_PER_TRIAL = 16
MIN_POPULATION = 64


@dataclass(frozen=True)
class TuningBudget:
    """How many candidates to measure: in all, per task, and per search round."""

    max_trials_global: int
    max_trials_per_task: int
    num_trials_per_iter: int = 16

    def planned_per_task(self, num_tasks: int) -> int:
        """A task's share of the budget: the global budget split evenly, within the per-task
        cap. MetaSchedule's scheduler gives more to tasks whose latency improves most."""
        return max(1, min(self.max_trials_per_task, -(-self.max_trials_global // max(num_tasks, 1))))

    @staticmethod
    def for_tasks(num_tasks: int, trials: int | None, trials_per_task: int | None) -> "TuningBudget":
        """A budget from the user's options.

        Neither given: 32 trials per task. Only a global budget: any task may use all of it
        (MetaSchedule's own default; its scheduler spends where latency improves most). Only
        a per-task cap: that many for every task.
        """
        if trials is None:
            per_task = trials_per_task or DEFAULT_TRIALS_PER_TASK
            total = per_task * max(num_tasks, 1)
        else:
            total = trials
            per_task = min(trials_per_task or total, total)
        return TuningBudget(
            max_trials_global=total,
            max_trials_per_task=per_task,
            num_trials_per_iter=max(1, min(16, per_task)),
        )


@dataclass
class TuningReport:
    """The outcome of one tuning run."""

    tasks: list[TaskProgress]
    seconds: float
    cancelled: bool = False
    first_build_at: float | None = None  # wall clock of this process's first built candidate
    seeds: "SeedRoundReport | None" = None  # the warm start's seeds, measured before the search
    pretrained_cost_model: bool = False  # the search's cost model started trained on past records

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def errors(self) -> int:
        return sum(t.build_errors + t.run_errors for t in self.tasks)


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
    trial_caps: Sequence[int | None] | None = None,
    warm: "WarmStart | None" = None,
) -> TuningReport:
    """Tune ``tasks`` for ``target``; records go to ``database`` as they are measured.

    ``cancelled`` is checked before every batch: once set, the batch in flight is measured
    and committed, nothing more starts, and the report says so. ``database.end_of_batch()``,
    if it has one, is called after every batch is committed to it (the registry's database
    writes it then; an agent's reports on its own schedule). MetaSchedule's own log goes to
    ``work_dir/logs``, and what TVM's C++ code writes to stderr meanwhile to
    ``work_dir/logs/tvm.log`` (foundation.processes.native_stderr): a listener drawing on the
    terminal writes to `terminal_stderr()`. ``trial_caps`` gives tasks a cap of their own below
    the budget's per-task cap (a reused task's top-up), None for the others.

    ``warm`` (foundation.meta_schedule.warm) brings seeds transplanted from similar workloads,
    measured first and out of the same budget, and a cost model trained on past records.
    """
    if not tasks:  # every task reused: nothing to search
        return TuningReport(tasks=[], seconds=0.0, cancelled=cancelled is not None and cancelled.is_set())
    target_kind = target.kind.name
    install_lean_tensor_intrinsics(target_kind)
    from tvm.s_tir import meta_schedule as ms

    pools = pools or WorkerPools()
    builder, runner = pools.get(target_kind)
    work_dir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    caps = list(trial_caps) if trial_caps is not None else [None] * len(tasks)
    if len(caps) != len(tasks):
        raise ValueError(f"{len(caps)} trial caps for {len(tasks)} tasks")
    # The uncapped tasks share what the capped ones leave of the budget.
    uncapped = sum(cap is None for cap in caps)
    capped_trials = sum(cap for cap in caps if cap is not None)
    planned = TuningBudget(max(budget.max_trials_global - capped_trials, 1), budget.max_trials_per_task,
                           budget.num_trials_per_iter).planned_per_task(uncapped)
    _write_task_list(work_dir, tasks, [planned if cap is None else cap for cap in caps])
    progress = [
        TaskProgress(index=i, name=t.name, weight=t.weight, flop=t.flop,
                     budget=budget.max_trials_per_task if cap is None else cap,
                     planned=planned if cap is None else cap, started=begin)
        for i, (t, cap) in enumerate(zip(tasks, caps))
    ]
    contexts = _tune_contexts(tasks, target, work_dir, seed, budget.max_trials_per_task)
    live = LiveProgress(progress, listener)
    picks = TaskPickHandler(live)
    logging.getLogger(_MS_LOGGER).addHandler(picks)
    pools.live = live
    history = LatencyHistory(len(tasks))
    batch_end = _BatchEnd(history, database)
    if listener:
        listener.started(progress)
    cost_model = warm.cost_model if warm is not None and warm.cost_model is not None else "xgb"
    seeds = None
    try:
        with native_stderr_to(work_dir / "logs" / NATIVE_LOG):
            if warm is not None and any(warm.seeds):
                from foundation.meta_schedule.warm import measure_seeds

                seeds = measure_seeds(contexts, warm.seeds, warm.seeds_per_task(planned), target, builder, runner,
                                      database, cost_model if cost_model != "xgb" else None,
                                      _space_generator(target), cancelled, live.picked)
            search_trials = budget.max_trials_global - (seeds.trials if seeds else 0)
            if search_trials <= 0 or (cancelled is not None and cancelled.is_set()):
                return _report(progress, begin, cancelled, pools, seeds, warm)
            ms.tune_tasks(
                tasks=contexts,
                task_weights=[float(t.weight) for t in tasks],
                work_dir=str(work_dir),
                max_trials_global=search_trials,
                max_trials_per_task=budget.max_trials_per_task,
                num_trials_per_iter=budget.num_trials_per_iter,
                builder=builder,
                runner=runner,
                database=database,
                cost_model=cost_model,
                # MetaSchedule's default callbacks, but for RemoveBuildArtifact: its rmtree raised into
                # the tune when a killed worker's files were still appearing (a measurement timeout on
                # a loaded box), ending the job; _BatchEnd removes the build directories instead.
                measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel(),
                                   batch_end.tvm_object],
                task_scheduler=joined_gradient(history, cancelled, seed, caps),
            )
    finally:
        pools.live = None
        logging.getLogger(_MS_LOGGER).removeHandler(picks)
        if hasattr(database, "flush"):
            database.flush()
        if listener:
            listener.finished(progress)
    return _report(progress, begin, cancelled, pools, seeds, warm)


def _report(progress, begin: float, cancelled, pools: WorkerPools, seeds, warm) -> TuningReport:
    return TuningReport(
        tasks=progress,
        seconds=time.monotonic() - begin,
        cancelled=cancelled is not None and cancelled.is_set(),
        first_build_at=pools.clock.first_build_at,
        seeds=seeds,
        pretrained_cost_model=warm is not None and warm.cost_model is not None,
    )


def _write_task_list(work_dir: Path, tasks: Sequence["TuningTask"], planned: Sequence[int]) -> None:
    """What was tuned, beside MetaSchedule's logs: names, weights and workload hashes, so that a
    report can name the registry's records by task (`farm report`)."""
    import json

    import tvm_ffi

    document = [{"name": t.name, "weight": t.weight, "flop": t.flop, "planned": share,
                 "workload_shash": str(tvm_ffi.structural_hash(t.mod))} for t, share in zip(tasks, planned)]
    (work_dir / TASK_LIST).write_text(json.dumps(document, indent=1))


def search_strategy(max_trials_per_task: int):
    """MetaSchedule's evolutionary search, its population sized to the budget.

    A small budget (a smoke tune, a test, a quick first pass) measures a handful of candidates
    per task; they are still picked by the cost model from ``CANDIDATES_PER_TRIAL`` times as many
    (at least ``MIN_POPULATION``), evolved from the registry's best records as usual.
    """
    if max_trials_per_task >= FULL_POPULATION_FROM:
        return "evolutionary"
    from tvm.s_tir import meta_schedule as ms

    population = max(MIN_POPULATION, CANDIDATES_PER_TRIAL * max_trials_per_task)
    return ms.search_strategy.EvolutionarySearch(population_size=population)


def _tune_contexts(tasks, target, work_dir: Path, seed: int | None, max_trials_per_task: int):
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    loggers = _task_loggers(work_dir, [t.name for t in tasks])
    seeds = fork_seed(seed, n=len(tasks))
    return [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator=_space_generator(target),
            search_strategy=search_strategy(max_trials_per_task),
            task_name=task.name,
            logger=logger,
            rand_state=rand_state,
            num_threads="physical",
        )
        for task, logger, rand_state in zip(tasks, loggers, seeds)
    ]


def _space_generator(target):
    """MetaSchedule's design space for the target kind, with rules that need no tensor core.

    For CUDA, "from-target" rules include the tensor-core ones, whose intrinsics are the
    ~30 s import the farm avoids (foundation.hardware.tvm_startup); plain "cuda" rules tune SIMT kernels.
    """
    from tvm.s_tir import meta_schedule as ms

    if target.kind.name == "cuda":
        return ms.space_generator.PostOrderApply(sch_rules="cuda", postprocs="cuda", mutator_probs="cuda")
    return "post-order-apply"


def _task_loggers(work_dir: Path, task_names: list[str]) -> list[logging.Logger]:
    """MetaSchedule's per-task log files under work_dir/logs, with its console handler
    replaced by a null one: stdout belongs to `--json`, and the farm draws its own progress."""
    from tvm.s_tir.meta_schedule.logging import create_loggers

    log_dir = work_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    width = len(str(max(len(task_names) - 1, 0)))
    names = [f"{_MS_LOGGER}.task_{i:0{width}d}_{name[:100]}" for i, name in enumerate(task_names)]
    # create_loggers re-lists the global logger's handlers by name; unnamed ones (added by
    # others, e.g. test log capture) would break it, so they step aside while it runs.
    global_logger = logging.getLogger(_MS_LOGGER)
    unnamed = [h for h in global_logger.handlers if h.get_name() is None]
    for handler in unnamed:
        global_logger.removeHandler(handler)
    try:
        create_loggers(
            log_dir=str(log_dir),
            params=[{"log_dir": str(log_dir), "logger_name": name} for name in names],
            logger_config={"handlers": {f"{_MS_LOGGER}.console": {"class": "logging.NullHandler"}}},
        )
    finally:
        for handler in unnamed:
            global_logger.addHandler(handler)
    return [logging.getLogger(name) for name in names]


class _BatchEnd:
    """A measure callback run after MetaSchedule's own (which commit the batch to the database):
    feeds the scheduler's latency history, tells the database (``end_of_batch``), and removes
    the batch's build directories, whatever a killed worker left in them."""

    def __init__(self, history: LatencyHistory, database):
        from tvm.ir.utils import derived_object
        from tvm.s_tir import meta_schedule as ms

        end_of_batch = getattr(database, "end_of_batch", None)

        @derived_object
        class _Callback(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
                history.record(task_id, builder_results, runner_results)
                for built in builder_results:
                    if built.artifact_path:
                        shutil.rmtree(os.path.dirname(built.artifact_path), ignore_errors=True)
                if end_of_batch is not None:
                    try:
                        end_of_batch()
                    except Exception:
                        # Kept by the database and written at the next flush (the last one,
                        # after tuning, raises); an error raised into MetaSchedule ends the tune.
                        logging.getLogger(__name__).warning("committing measured records failed; "
                                                            "retrying after the next batch", exc_info=True)

        self.tvm_object = _Callback()
