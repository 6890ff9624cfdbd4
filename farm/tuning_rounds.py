"""`farm submit --until`, embedded: tune in rounds, build and time the model after each, stop when good enough.

Each round tunes a slice of the job's budget, planned afresh (foundation.domain.trial_plan)
from what the registry has measured so far, so later rounds go where the latency now is;
records accumulate in the registry, so each round starts from the last one's best. After a
round the model is built with the best records and judged on this box against the goal
(foundation.job_driver.tuning_rounds), with the tuning's worker processes stopped. When to
stop is foundation.domain.tuning_rounds' rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.domain.tuning_rounds import RoundResult, Stop, round_budgets, verdict
from foundation.job_driver.tuning_rounds import RoundJudge, RoundsOutcome, UntilRequest
from foundation.meta_schedule.tuner import TuningBudget, TuningReport, WorkerPools

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.domain.trial_plan import TrialPlan
    from foundation.models.loaded import LoadedModel


@dataclass
class TunedRounds:
    """What the rounds leave for the rest of the job."""

    report: TuningReport  # every round's tuning as one
    plans: list["TrialPlan"] = field(default_factory=list)
    library: bytes | None = None  # the last round's build, with the records the job ends with


def tune_in_rounds(
    tasks: Sequence["TuningTask"],
    target: "tvm.target.Target",
    database,
    budget: TuningBudget,
    work_dir: Path,
    outcome: RoundsOutcome,
    until: UntilRequest,
    judge: RoundJudge,
    *,
    loaded: "LoadedModel",
    pools: WorkerPools,
    observer,
    cancelled: threading.Event,
    seed: int,
    tell: Callable[[str, str], None],
    prepack: bool = False,
    block_activations: bool = False,
    on_round: Callable[[TuningReport], None] = lambda report: None,
) -> TunedRounds:
    """Tune ``tasks`` in rounds until the model beats the goal, patience runs out or the budget
    is spent; fills ``outcome`` as it goes."""
    from foundation.compile import build_library
    from foundation.meta_schedule import tuner

    reports: list[TuningReport] = []
    tuned = TunedRounds(TuningReport(tasks=[], seconds=0.0, cancelled=False))
    spent = [0] * len(tasks)
    slices = round_budgets(budget.max_trials_global, until.round_trials)
    for number, trials in enumerate(slices, start=1):
        round_budget = TuningBudget(trials, budget.max_trials_per_task, budget.num_trials_per_iter)
        plan = tuner.trial_plan(tasks, round_budget, database, spent=spent)
        if plan.total == 0:  # every task is at its cap
            outcome.stopped = Stop.BUDGET
            break
        tell("round", f"round {number} of at most {len(slices)}: {plan.total} trials")
        if observer:
            observer.planned(plan.to_json())
        report = tuner.tune(tasks, target, database, round_budget, work_dir, pools=pools, listener=observer,
                            cancelled=cancelled, seed=seed + number - 1, plan=plan)
        reports.append(report)
        tuned.plans.append(plan)
        spent = [s + t.trials for s, t in zip(spent, report.tasks)]
        on_round(TuningReport.combined(reports))
        if report.cancelled or cancelled.is_set():
            outcome.stopped, outcome.cancelled = None, True
            break
        pools.close()  # the model is timed with no worker about (bench/quiet_timing.py)
        tuned.library = build_library(loaded, target, database, prepack=prepack, block_activations=block_activations)
        timing = judge.judge(tuned.library, target.kind.name)
        outcome.rounds.append(RoundResult(report.trials, timing, tuner.estimated_ms(tasks, database)))
        outcome.planned.append(list(plan.trials))
        tell("timed", round_line(number, outcome))
        outcome.stopped = verdict(outcome.rounds, until.patience, budget.max_trials_global - sum(spent))
        if outcome.stopped is not None:
            break
    else:
        outcome.stopped = Stop.BUDGET
    tuned.report = TuningReport.combined(reports) if reports else TuningReport(tasks=[], seconds=0.0,
                                                                              cancelled=cancelled.is_set())
    return tuned


def round_line(number: int, outcome: RoundsOutcome) -> str:
    """What a round's timing said, in one line."""
    last = outcome.rounds[-1]
    timing, estimate = last.timing, last.estimated_ms
    against = (f"onnxruntime {_ms(timing.goal_ms)} median, faster in {timing.blocks_won} of {timing.blocks} "
               "blocks" if timing.blocks_won is not None else f"goal {outcome.goal.describe()}")
    return (f"round {number}: the model runs in {_ms(timing.candidate_ms)} here (median; upper quartile "
            f"{_ms(timing.candidate_upper_ms)}; {against}: {'beaten' if timing.beats else 'not beaten'})"
            + (f", estimated from records {_ms(estimate)}" if estimate is not None else ""))


def summed_plan(plans: Sequence["TrialPlan"], budget: int) -> "TrialPlan":
    """The rounds' plans as one: each task's trials added up, its share as the last round saw it."""
    from foundation.domain.trial_plan import TrialPlan

    last = plans[-1]
    tasks = tuple(replace(line, trials=sum(plan.tasks[i].trials for plan in plans))
                  for i, line in enumerate(last.tasks))
    return TrialPlan(tasks, budget, last.per_task_cap)


def _ms(value: float) -> str:
    return f"{value:.3g} ms"
