"""`farm submit --until`: tune in rounds, build and time the model after each, stop when it is good enough.

Each round tunes a slice of the job's budget, planned afresh (foundation.domain.trial_plan)
from what the registry has measured so far, so later rounds go where the latency now is;
records accumulate in the registry, so each round starts from the last one's best. After a
round the model is built with the best records and timed on this box, with the tuning's
worker processes stopped. When to stop is foundation.domain.tuning_rounds' rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundation.domain.tuning_rounds import (
    ONNXRUNTIME,
    Goal,
    RoundResult,
    Stop,
    round_budgets,
    verdict,
)
from foundation.errors import BadInput
from foundation.meta_schedule.tuner import TuningBudget, TuningReport, WorkerPools

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.domain.trial_plan import TrialPlan
    from foundation.models.loaded import LoadedModel
    from foundation.models.model_key import ModelKey
    from foundation.runtime.library_runner import Latency

TIMING_RUNS = 10
TIMING_WARMUP = 2
STOP_TEXT = {
    Stop.REACHED: "reached",
    Stop.PATIENCE: "not reached, no improvement",
    Stop.BUDGET: "not reached, budget spent",
}


@dataclass(frozen=True)
class UntilRequest:
    """What `--until` asked for."""

    goal: Goal
    patience: int
    round_trials: int | None = None


@dataclass
class RoundsOutcome:
    """How a job tuned in rounds ended."""

    goal: Goal
    goal_ms: float
    reference: "Latency | None"  # onnxruntime's, when it is the goal
    rounds: list[RoundResult] = field(default_factory=list)
    plans: list["TrialPlan"] = field(default_factory=list)
    stopped: Stop | None = None  # None: cancelled
    library: bytes | None = None  # the last round's build, with the records the job ends with

    @property
    def latency_ms(self) -> float | None:
        return self.rounds[-1].latency_ms if self.rounds else None

    def summary(self) -> str:
        """One line: how it ended, with the figures."""
        goal = f"onnxruntime's {_ms(self.goal_ms)}" if self.reference else self.goal.describe()
        trials = sum(r.trials for r in self.rounds)
        done = f"after {len(self.rounds)} round{'s' * (len(self.rounds) != 1)} ({trials} trials)"
        if self.stopped is None or self.latency_ms is None:
            return f"cancelled {done}; goal {goal}"
        ran = f"the tuned model ran in {_ms(self.latency_ms)} here"
        if self.stopped is Stop.REACHED:
            return f"reached: {ran}, at or below {goal}, {done}"
        why = ("the estimated latency did not improve by 1% for the last rounds" if self.stopped is Stop.PATIENCE
               else "the budget is spent")
        return f"{STOP_TEXT[self.stopped]}: {ran}, above {goal}, {done}; {why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal.describe(),
            "goal_ms": self.goal_ms,
            "reference_latency_ms": self.reference.to_json() if self.reference else None,
            "stopped": self.stopped.value if self.stopped else "cancelled",
            "latency_ms": self.latency_ms,
            "summary": self.summary(),
            "rounds": [{"trials": r.trials, "latency_ms": r.latency_ms, "estimated_ms": r.estimated_ms,
                        "planned": plan.trials} for r, plan in zip(self.rounds, self.plans)],
        }


def check_until(until: UntilRequest, key: "ModelKey") -> None:
    """Refuse, before any work, a goal this submit cannot measure."""
    if until.goal.reference != ONNXRUNTIME:
        return
    if onnx_form(key) is None:
        raise BadInput(f"--until onnxruntime needs the model as an ONNX file; {key.name} is a zoo model "
                       "the farm cannot export to ONNX",
                       "submit the model's .onnx file, or give a latency instead: --until 20ms")
    from foundation.runtime.onnx_reference import require_onnxruntime

    require_onnxruntime()


def onnx_form(key: "ModelKey") -> Path | None:
    """The model's ONNX file, which onnxruntime runs: the file it came from, if it came from one."""
    return key.path if key.source == "onnx" else None


def goal_latency(until: UntilRequest, key: "ModelKey", loaded: "LoadedModel",
                 seed: int) -> tuple[float, "Latency | None"]:
    """The latency to beat in ms, and onnxruntime's timing when that is the goal."""
    if until.goal.reference != ONNXRUNTIME:
        assert until.goal.latency_ms is not None
        return until.goal.latency_ms, None
    from foundation.runtime.onnx_reference import time_onnxruntime

    path = onnx_form(key)
    assert path is not None  # check_until refused the rest
    latency = time_onnxruntime(path, [s.name for s in loaded.inputs], loaded.make_inputs(seed))
    return latency.median_ms, latency


def tune_in_rounds(
    tasks: Sequence["TuningTask"],
    target: "tvm.target.Target",
    database,
    budget: TuningBudget,
    work_dir: Path,
    outcome: RoundsOutcome,
    until: UntilRequest,
    *,
    loaded: "LoadedModel",
    pools: WorkerPools,
    observer,
    cancelled: threading.Event,
    seed: int,
    tell: Callable[[str, str], None],
    prepack: bool = False,
    on_round: Callable[[TuningReport], None] = lambda report: None,
) -> TuningReport:
    """Tune ``tasks`` in rounds until ``outcome.goal_ms`` is met, patience runs out or the budget
    is spent; fills ``outcome`` as it goes. Returns the rounds' tuning as one report."""
    from foundation.compile import build_library
    from foundation.meta_schedule import tuner

    reports: list[TuningReport] = []
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
        outcome.plans.append(plan)
        spent = [s + t.trials for s, t in zip(spent, report.tasks)]
        on_round(TuningReport.combined(reports))
        if report.cancelled or cancelled.is_set():
            outcome.stopped = None
            break
        pools.close()  # the model is timed with no worker about (bench/quiet_timing.py)
        outcome.library = build_library(loaded, target, database, prepack=prepack)
        latency = _time(outcome.library, target.kind.name, loaded, seed)
        outcome.rounds.append(RoundResult(report.trials, latency.median_ms, tuner.estimated_ms(tasks, database)))
        estimate = outcome.rounds[-1].estimated_ms
        goal = (f"onnxruntime {_ms(outcome.goal_ms)}" if outcome.reference else f"goal {outcome.goal.describe()}")
        tell("timed", f"round {number}: the model runs in {_ms(latency.median_ms)} here (median of {latency.runs}; "
                      f"{goal})" + (f", estimated from records {_ms(estimate)}" if estimate is not None else ""))
        outcome.stopped = verdict(outcome.rounds, outcome.goal_ms, until.patience,
                                  budget.max_trials_global - sum(spent))
        if outcome.stopped is not None:
            break
    else:
        outcome.stopped = Stop.BUDGET
    if not reports:
        return TuningReport(tasks=[], seconds=0.0, cancelled=cancelled.is_set())
    return TuningReport.combined(reports)


def summed_plan(plans: Sequence["TrialPlan"], budget: int) -> "TrialPlan":
    """The rounds' plans as one: each task's trials added up, its share as the last round saw it."""
    from foundation.domain.trial_plan import TrialPlan

    last = plans[-1]
    tasks = tuple(replace(line, trials=sum(plan.tasks[i].trials for plan in plans))
                  for i, line in enumerate(last.tasks))
    return TrialPlan(tasks, budget, last.per_task_cap)


def _ms(value: float) -> str:
    return f"{value:.3g} ms"


def _time(library: bytes, target_kind: str, loaded: "LoadedModel", seed: int) -> "Latency":
    from foundation.runtime.library_runner import LoadedLibrary

    model = LoadedLibrary(library, target_kind)
    model.set_weights(loaded.make_weights(seed))
    return model.time(loaded.make_inputs(seed), runs=TIMING_RUNS, warmup=TIMING_WARMUP)
