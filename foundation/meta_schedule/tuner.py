"""Tune a set of tasks with MetaSchedule (evolutionary search, xgb cost model) into a database.

The database is the farm's registry, so the search starts from every record the farm already
has for these workloads on this fingerprint (MetaSchedule seeds its population from
``get_top_k``), and every measured batch is committed to it before the next batch starts
(foundation.meta_schedule.task_scheduler), so a killed tune keeps all but the batch in flight.
A cancel stops the tuning after the batch in flight, whose records are committed too.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.domain.timing_context import TimingContext
from foundation.domain.trial_phases import ceiling_ms, first_phase_trials, phased_cap, second_phase
from foundation.domain.trial_plan import TaskDemand, TrialPlan, plan_trials
from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
from foundation.logs import LostLogs
from foundation.meta_schedule.measure import WorkerPools
from foundation.meta_schedule.planned_search import COLD_EXPLORATION, WARM_EXPLORATION, planned_search
from foundation.meta_schedule.progress import (
    KEPT_ERRORS_PER_TASK,
    LiveProgress,
    ProgressListener,
    TaskPickHandler,
    TaskProgress,
)
from foundation.meta_schedule.task_scheduler import LatencyHistory, joined_gradient
from foundation.meta_schedule.untuned_form import measure_untuned_forms, measures_untuned_form
from foundation.meta_schedule.warm.cost_models import new_model
from foundation.processes.native_stderr import native_stderr_to, terminal_stderr

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.meta_schedule.warm import SeedRoundReport, WarmStart

__all__ = [
    "TuningBudget", "TuningReport", "estimated_ms", "trial_plan", "tune",
]

_MS_LOGGER = "tvm.s_tir.meta_schedule"
NATIVE_LOG = "tvm.log"  # in the work directory's logs/, beside MetaSchedule's own
TASK_LIST = "tasks.json"  # in the work directory: the tasks tuned (`_write_task_list`)
DEFAULT_TRIALS_PER_TASK = 32


@dataclass(frozen=True)
class TuningBudget:
    """How many candidates to measure: in all, at most per task, and per search round.

    How the global budget is split over tasks is the trial plan's (foundation.domain.trial_plan):
    where the model's latency is, within ``max_trials_per_task``.
    """

    max_trials_global: int
    max_trials_per_task: int
    num_trials_per_iter: int = 16

    @staticmethod
    def for_tasks(num_tasks: int, trials: int | None, trials_per_task: int | None,
                  phased: bool = False) -> "TuningBudget":
        """A budget from the user's options.

        Neither given: 32 trials per task in all, spread by the plan with no per-task cap. Only
        a global budget: any task may be planned all of it. Only a per-task cap: that many
        times the tasks in all, and no task more than the cap. ``phased`` (a two-phase plan,
        foundation.domain.trial_phases): with no per-task cap given, a task may take a multiple
        of the average (`phased_cap`), not all of the budget; a cap given stays the cap.
        """
        if trials is None:
            total = (trials_per_task or DEFAULT_TRIALS_PER_TASK) * max(num_tasks, 1)
        else:
            total = trials
        uncapped = phased_cap(total, num_tasks) if phased else total
        per_task = min(trials_per_task or uncapped, total)
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
    # What it started from: "this fingerprint's records", or the cross model's CrossCostModel.started_from.
    cost_model_start: str = ""
    # A two-phase plan as it was tuned: each task's trials in each phase (foundation.domain.trial_phases).
    plan: TrialPlan | None = None

    @staticmethod
    def combined(reports: Sequence["TuningReport"]) -> "TuningReport":
        """Runs over the same tasks (rounds of one job) as one: trials and errors added, each
        task's best the best of all."""
        tasks = [replace(t, errors=list(t.errors)) for t in reports[0].tasks]
        for report in reports[1:]:
            for into, task in zip(tasks, report.tasks):
                into.trials += task.trials
                into.planned += task.planned
                into.budget += task.budget
                into.build_errors += task.build_errors
                into.run_errors += task.run_errors
                if task.best_sec is not None and (into.best_sec is None or task.best_sec < into.best_sec):
                    into.best_sec = task.best_sec
                into.errors = (into.errors + task.errors)[:KEPT_ERRORS_PER_TASK]
                into.last_update = task.last_update or into.last_update
        return TuningReport(
            tasks=tasks,
            seconds=sum(r.seconds for r in reports),
            cancelled=any(r.cancelled for r in reports),
            first_build_at=next((r.first_build_at for r in reports if r.first_build_at is not None), None),
            seeds=reports[0].seeds,
            pretrained_cost_model=any(r.pretrained_cost_model for r in reports),
            cost_model_start=next((r.cost_model_start for r in reports if r.cost_model_start), ""),
        )

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
    plan: TrialPlan | None = None,
    trial_caps: Sequence[int | None] | None = None,
    warm: "WarmStart | None" = None,
    peak_gflops: float | None = None,
) -> TuningReport:
    """Tune ``tasks`` for ``target``; records go to ``database`` as they are measured.

    Each task gets the trials ``plan`` gives it (default: `trial_plan` of the tasks, the budget,
    ``trial_caps`` and what ``database`` has measured of them), never more: its search stops there.

    ``cancelled`` is checked before every batch: once set, the batch in flight is measured
    and committed, nothing more starts, and the report says so. ``database.end_of_batch()``,
    if it has one, is called after every batch is committed to it (the registry's database
    writes it then; an agent's reports on its own schedule). MetaSchedule's own log goes to
    ``work_dir/logs``, and what TVM's C++ code writes to stderr meanwhile to
    ``work_dir/logs/tvm.log`` (foundation.processes.native_stderr): a listener drawing on the
    terminal writes to `terminal_stderr()`. ``trial_caps`` gives tasks a cap of their own below
    the budget's per-task cap (a reused task's top-up), None for the others.

    ``warm`` (foundation.meta_schedule.warm) brings seeds transplanted from similar workloads,
    measured first and out of each task's plan (every task's best seed before any task's second:
    the model's estimate exists after one seed a task), and a cost model trained on past records.

    A two-phase ``plan`` (foundation.domain.trial_phases: its ``phases`` set) is tuned in two searches:
    its first phase, seeds and untuned forms included, then what it left re-planned from each task's
    best measured time against its ceiling at ``peak_gflops`` (the fingerprint's; None: by time alone),
    with the same cost model; the report's ``plan`` says what each phase gave.
    """
    if not tasks:  # every task reused: nothing to search
        return TuningReport(tasks=[], seconds=0.0, cancelled=cancelled is not None and cancelled.is_set())
    target_kind = target.kind.name
    install_lean_tensor_intrinsics(target_kind)
    from foundation.meta_schedule.warm.context_groups import grouped_by_context  # TVM's meta_schedule

    pools = pools or WorkerPools()
    builder, runner = pools.get(target_kind)
    work_dir.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    plan = plan or trial_plan(tasks, budget, database, trial_caps=trial_caps)
    # The job's logs are a record of it, not what it makes: on a full disk it goes on, saying so once,
    # on the terminal (stderr itself points at a log file there while it tunes).
    terminal = terminal_stderr()
    lost = LostLogs(work_dir, terminal)
    try:
        _write_task_list(work_dir, tasks, plan.trials)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            terminal.close()
            raise
        lost.say(err)
    progress = [
        TaskProgress(index=i, name=t.name, weight=t.weight, flop=t.flop,
                     budget=planned, planned=planned, started=begin)
        for i, (t, planned) in enumerate(zip(tasks, plan.trials))
    ]
    first = first_phase_trials(plan)
    search_plan = list(first)  # what each task's search may measure: less the seeds measured first
    try:
        loggers = _task_loggers(work_dir, [t.name for t in tasks], lost=lost)
        contexts = _tune_contexts(tasks, target, work_dir, seed, search_plan, explorations(warm, len(tasks)),
                                  loggers=loggers)
    except BaseException:
        terminal.close()
        raise
    live = LiveProgress(progress, listener)
    picks = TaskPickHandler(live)
    logging.getLogger(_MS_LOGGER).addHandler(picks)
    pools.live = live
    timings = pools.plan_timings([t.mod for t in tasks], target_kind)  # each task's cache state as timed
    timed_in = [t.context.value for t in timings] if timings else [TimingContext.WARM.value] * len(tasks)
    if hasattr(database, "time_tasks_in"):  # the farm's databases file each record under its task's context
        database.time_tasks_in([t.mod for t in tasks], timed_in)
    history = LatencyHistory(len(tasks))
    batch_end = _BatchEnd(history, database)
    if listener:
        listener.started(progress)
    pretrained = warm.cost_model if warm is not None else None
    # A cold search's model is MetaSchedule's "xgb" (adaptive training), on the farm's threads.
    cost_model = grouped_by_context(pretrained if pretrained is not None else new_model(adaptive_training=True),
                                    contexts, timed_in)
    seeds = None
    try:
        with native_stderr_to(work_dir / "logs" / NATIVE_LOG):
            # A warm job's best seed of each task goes first, then each task's untuned form, then the
            # other seeds: the model's estimate exists once every task has a measured schedule, and
            # the seeds are the ones likely to be fast (docs/benchmarks.md, "Warm starts").
            seed_round = None
            if warm is not None and any(warm.seeds):
                from foundation.meta_schedule.warm import SeedRound

                untuned_trial = 1 if measures_untuned_form(target) else 0
                seed_round = SeedRound(contexts, warm.seeds,
                                       [min(warm.seeds_per_task(planned), planned - untuned_trial)
                                        for planned in first],
                                       target, builder, runner, database, _space_generator(target), cancelled,
                                       live.picked)
                seed_round.measure_best()
            untuned = measure_untuned_forms(contexts, search_plan, target, builder, runner, database, cancelled,
                                            live.picked)
            if seed_round is not None:
                seed_round.measure_rest()
                seeds = seed_round.finish(cost_model if pretrained is not None else None)
            for i, measured in enumerate(untuned):  # the untuned form and the seeds come out of the plan
                search_plan[i] = max(0, search_plan[i] - measured - (seeds.per_task[i] if seeds else 0))
            search = _Search(tasks, database, cost_model, budget.num_trials_per_iter, builder, runner, work_dir,
                             cancelled, seed)
            if sum(search_plan) > 0 and not (cancelled is not None and cancelled.is_set()):
                search.run(contexts, search_plan, history, batch_end)
            if plan.phases and not (cancelled is not None and cancelled.is_set()):
                phased = _second_phase(tasks, plan, database, [p.trials for p in progress], peak_gflops)
                for task, line in zip(progress, phased.tasks):
                    task.planned = task.budget = line.trials
                if sum(line.phases[1] for line in phased.tasks) > 0:
                    second = [line.phases[1] for line in phased.tasks]
                    history = LatencyHistory(len(tasks))
                    contexts = _tune_contexts(tasks, target, work_dir, None if seed is None else seed + 1,
                                              second, explorations(warm, len(tasks)), loggers=loggers)
                    search.run(contexts, second, history, _BatchEnd(history, database))
                return _report(progress, begin, cancelled, pools, seeds, warm, phased)
    except Exception as err:
        # TVM hands the database's own error back as a RuntimeError of its text (registry_database).
        kept = getattr(database, "farm_error", None)
        if kept is None or kept is err or str(kept) not in str(err):
            raise
        raise kept from err
    finally:
        pools.live = None
        pools.timings = None
        logging.getLogger(_MS_LOGGER).removeHandler(picks)
        terminal.close()
        if hasattr(database, "flush"):
            database.flush()
        if listener:
            listener.finished(progress)
    return _report(progress, begin, cancelled, pools, seeds, warm)


@dataclass
class _Search:
    """MetaSchedule's search over the tasks, one call a phase: each task stopped at its plan, every
    batch committed as it is measured, the cost model kept from one phase to the next."""

    tasks: Sequence["TuningTask"]
    database: object
    cost_model: object
    num_trials_per_iter: int
    builder: object
    runner: object
    work_dir: Path
    cancelled: threading.Event | None
    seed: int | None

    def run(self, contexts, search_plan: list[int], history: LatencyHistory, batch_end: "_BatchEnd") -> None:
        from tvm.s_tir import meta_schedule as ms

        ms.tune_tasks(
            tasks=contexts,
            task_weights=[float(t.weight) for t in self.tasks],
            work_dir=str(self.work_dir),
            # Each task's search stops at its plan (planned_search), whose sum is within the budget.
            max_trials_global=sum(search_plan),
            max_trials_per_task=max(search_plan),
            num_trials_per_iter=self.num_trials_per_iter,
            builder=self.builder,
            runner=self.runner,
            database=self.database,
            cost_model=self.cost_model,
            # MetaSchedule's default callbacks, but for RemoveBuildArtifact: its rmtree raised into
            # the tune when a killed worker's files were still appearing (a measurement timeout on
            # a loaded box), ending the job; _BatchEnd removes the build directories instead.
            measure_callbacks=[ms.measure_callback.AddToDatabase(), ms.measure_callback.UpdateCostModel(),
                               batch_end.tvm_object],
            # A task whose plan is spent is ended, never picked again.
            task_scheduler=joined_gradient(history, self.cancelled, self.seed, list(search_plan)),
        )


def _second_phase(tasks: Sequence["TuningTask"], plan: TrialPlan, database, spent: Sequence[int],
                  peak_gflops: float | None) -> TrialPlan:
    """What a two-phase ``plan`` leaves after its first phase (each task measured ``spent``), re-planned
    from the best records ``database`` now holds against each task's ceiling at ``peak_gflops``."""
    if hasattr(database, "flush"):  # the first phase's last records, read back below
        database.flush()
    demands = [TaskDemand(t.name, t.flop, t.weight, _best_ms(database, t.mod),
                          ceiling_ms=ceiling_ms(t.flop, t.weight, peak_gflops)) for t in tasks]
    return second_phase(plan, demands, spent, peak_gflops)


def _report(progress, begin: float, cancelled, pools: WorkerPools, seeds, warm,
            plan: TrialPlan | None = None) -> TuningReport:
    return TuningReport(
        tasks=progress,
        seconds=time.monotonic() - begin,
        cancelled=cancelled is not None and cancelled.is_set(),
        first_build_at=pools.clock.first_build_at,
        seeds=seeds,
        pretrained_cost_model=warm is not None and warm.cost_model is not None,
        cost_model_start=getattr(warm.cost_model, "started_from", "this fingerprint's records")
        if warm is not None and warm.cost_model is not None else "",
        plan=plan,
    )


def trial_plan(tasks: Sequence["TuningTask"], budget: TuningBudget, database=None,
               trial_caps: Sequence[int | None] | None = None, spent: Sequence[int] | None = None,
               in_model_ms: Sequence[float | None] | None = None,
               ceiling_ms: Sequence[float] | None = None) -> TrialPlan:
    """The tasks' trial plan for ``budget``: by FLOPs x weight, and by the best measured time of
    each task ``database`` (any MetaSchedule database) has records of.

    ``trial_caps`` gives tasks trials of their own (a reused task's top-up), None for the
    others, which share what those leave of the budget. ``spent``: the trials each task had in
    earlier rounds of this job (`farm submit --until`). ``in_model_ms`` and ``ceiling_ms``: each
    task's time in one inference of the built model and its ceiling (the round before's,
    foundation.job_driver.in_model_times): the plan then goes by what each loses in the model.
    """
    caps = list(trial_caps) if trial_caps is not None else [None] * len(tasks)
    if len(caps) != len(tasks):
        raise ValueError(f"{len(caps)} trial caps for {len(tasks)} tasks")
    measured = [_best_ms(database, task.mod) for task in tasks] if database is not None else [None] * len(tasks)
    in_model = list(in_model_ms) if in_model_ms is not None else [None] * len(tasks)
    ceilings = list(ceiling_ms) if ceiling_ms is not None else [0.0] * len(tasks)
    demands = [TaskDemand(t.name, t.flop, t.weight, best, seen, ceiling)
               for t, best, seen, ceiling in zip(tasks, measured, in_model, ceilings)]
    if all(cap is None for cap in caps):
        return plan_trials(demands, budget.max_trials_global, budget.max_trials_per_task, spent)
    fixed = [min(cap, budget.max_trials_global) if cap is not None else 0 for cap in caps]
    free = [i for i, cap in enumerate(caps) if cap is None]
    left = max(0, budget.max_trials_global - sum(fixed))
    shared = plan_trials([demands[i] for i in free], left, min(budget.max_trials_per_task, left))
    trials = dict(zip(free, shared.trials))
    whole = plan_trials(demands, budget.max_trials_global, budget.max_trials_per_task)  # for the shares
    return TrialPlan(
        tasks=tuple(replace(line, trials=trials.get(i, fixed[i])) for i, line in enumerate(whole.tasks)),
        budget=budget.max_trials_global,
        per_task_cap=budget.max_trials_per_task,
    )


def estimated_ms(tasks: Sequence["TuningTask"], database) -> float | None:
    """The model's latency as ``database``'s best records predict it (each task's best time x its
    calls), in ms; None while a task has no valid record."""
    total = 0.0
    for task in tasks:
        best = _best_ms(database, task.mod)
        if best is None:
            return None
        total += best * task.weight
    return total


def _best_ms(database, mod) -> float | None:
    """The mean time in ms of the fastest valid record of ``mod`` in ``database``, if any."""
    if not database.has_workload(mod):
        return None
    for record in database.get_top_k(database.commit_workload(mod), 1):
        secs = [float(s) for s in (record.run_secs or [])]
        if secs and all(0 < s < 1e9 for s in secs):
            return sum(secs) / len(secs) * 1e3
    return None


def _write_task_list(work_dir: Path, tasks: Sequence["TuningTask"], planned: Sequence[int]) -> None:
    """What was tuned, beside MetaSchedule's logs: names, weights and workload hashes, so that a
    report can name the registry's records by task (`farm report`)."""
    import json

    import tvm_ffi

    document = [{"name": t.name, "weight": t.weight, "flop": t.flop, "planned": trials,
                 "workload_shash": str(tvm_ffi.structural_hash(t.mod))} for t, trials in zip(tasks, planned)]
    (work_dir / TASK_LIST).write_text(json.dumps(document, indent=1))


def explorations(warm, tasks: int) -> list[float]:
    """Each task's share of every batch drawn at random from fresh samples: a warm search's, whose
    picks seeds and a model trained on other records steer, explores as a cold one would."""
    if warm is None:
        return [COLD_EXPLORATION] * tasks
    seeded = list(warm.seeds) + [()] * (tasks - len(warm.seeds))
    return [WARM_EXPLORATION if warm.cost_model is not None or seeded[i] else COLD_EXPLORATION for i in range(tasks)]


def _tune_contexts(tasks, target, work_dir: Path, seed: int | None, planned: list[int],
                   exploration: list[float] | None = None, *, lost: LostLogs | None = None,
                   loggers: list[logging.Logger] | None = None):
    """The tasks' TuneContexts, logging to ``loggers`` (default: new ones under ``work_dir``; a
    second phase's contexts log where the first phase's did)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    if loggers is None:
        loggers = _task_loggers(work_dir, [t.name for t in tasks], lost=lost)
    seeds = fork_seed(seed, n=len(tasks))
    return [
        ms.TuneContext(
            mod=task.mod,
            target=target,
            space_generator=_space_generator(target),
            search_strategy=planned_search(planned, index,
                                           exploration[index] if exploration is not None else COLD_EXPLORATION),
            task_name=task.name,
            logger=logger,
            rand_state=rand_state,
            num_threads="physical",
        )
        for index, (task, logger, rand_state) in enumerate(zip(tasks, loggers, seeds))
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


def _task_loggers(work_dir: Path, task_names: list[str], *, lost: LostLogs | None = None) -> list[logging.Logger]:
    """MetaSchedule's per-task log files under work_dir/logs, with its console handler
    replaced by a null one: stdout belongs to `--json`, and the farm draws its own progress.
    ``lost`` says once when a full disk stops them."""
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
    loggers = [logging.getLogger(name) for name in names]
    if lost is not None:
        lost.watch(h for logger in [global_logger, *loggers] for h in logger.handlers
                   if isinstance(h, logging.FileHandler))
    return loggers


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
