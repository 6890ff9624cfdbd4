"""`farm submit --until`, embedded: each round tuned here, in-process, by the rounds loop written once for both
modes (foundation.job_driver.rounds_loop).

Records accumulate in the registry, so each round starts from the last one's best. A round's model is
built and judged on this box with the tuning's worker processes stopped (bench/quiet_timing.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.job_driver.rounds_loop import TunedRound, TuningInRounds
from foundation.meta_schedule.measure import WorkerPools
from foundation.meta_schedule.tuner import TuningBudget, TuningReport
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.trial_plan import TrialPlan


@dataclass
class TunedRounds:
    """What the rounds leave for the rest of the job."""

    report: TuningReport  # every round's tuning as one
    plans: list["TrialPlan"] = field(default_factory=list)
    library: bytes | None = None  # the last round's build, with the records the job ends with


def tune_in_rounds(
    rounds: TuningInRounds,
    outcome: RoundsOutcome,
    work_dir: Path,
    *,
    pools: WorkerPools,
    observer,
    cancelled: threading.Event,
    seed: int,
    tell: Callable[[str, str], None],
    on_round: Callable[[TuningReport], None] = lambda report: None,
) -> TunedRounds:
    """Tune the job's tasks in rounds until the model beats the goal, patience runs out or the budget
    is spent; fills ``outcome`` as it goes."""
    from foundation.meta_schedule import tuner

    reports: list[TuningReport] = []
    plans: list["TrialPlan"] = []
    database = rounds.database()

    def tune_round(number: int, plan: "TrialPlan") -> TunedRound | None:
        tell("round", f"round {number} of at most {len(rounds.slices)}: {plan.total} trials")
        if observer:
            observer.planned(plan.to_json())
        budget = TuningBudget(plan.budget, rounds.budget.max_trials_per_task, rounds.budget.num_trials_per_iter)
        report = tuner.tune(rounds.tasks, rounds.target, database, budget, work_dir, pools=pools,
                            listener=observer, cancelled=cancelled, seed=seed + number - 1, plan=plan)
        reports.append(report)
        plans.append(plan)
        on_round(TuningReport.combined(reports))
        if report.cancelled or cancelled.is_set():
            return None
        pools.close()  # the model is timed with no worker about (bench/quiet_timing.py)
        return TunedRound(report.trials, [t.trials for t in report.tasks])

    rounds.run(outcome, tune_round, on_judged=lambda number: tell("timed", round_line(number, outcome)))
    report = TuningReport.combined(reports) if reports else TuningReport(tasks=[], seconds=0.0,
                                                                        cancelled=cancelled.is_set())
    return TunedRounds(report, plans, rounds.library)


def round_line(number: int, outcome: RoundsOutcome) -> str:
    """What a round's timing said, in one line."""
    last = outcome.rounds[-1]
    timing, estimate = last.timing, last.estimated_ms
    against = (f"onnxruntime {milliseconds(timing.goal_ms)} median, faster in {timing.blocks_won} of {timing.blocks} "
               "blocks" if timing.blocks_won is not None else f"goal {outcome.goal.describe()}")
    return (f"round {number}: the model runs in {milliseconds(timing.candidate_ms)} here (median; upper quartile "
            f"{milliseconds(timing.candidate_upper_ms)}; {against}: {'beaten' if timing.beats else 'not beaten'})"
            + (f", estimated from records {milliseconds(estimate)}" if estimate is not None else ""))


def summed_plan(plans: Sequence["TrialPlan"], budget: int) -> "TrialPlan":
    """The rounds' plans as one: each task's trials added up, its share as the last round saw it."""
    from foundation.domain.trial_plan import TrialPlan

    last = plans[-1]
    tasks = tuple(replace(line, trials=sum(plan.tasks[i].trials for plan in plans))
                  for i, line in enumerate(last.tasks))
    return TrialPlan(tasks, budget, last.per_task_cap)

