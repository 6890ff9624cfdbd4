"""The `--until` loop, written once for both modes: plan a round, have it tuned, judge it, go on or stop.

    advance ──► (a round tuned, each mode's way) ──► advance ──► ... ──► stopped
    judge the round just tuned: its model built with the job's records and timed against the goal,
    then the rule (foundation.domain.tuning_rounds.verdict) says stop, or the next round is planned

Each round tunes a slice of the job's budget (round_budgets), planned afresh from what the registry
has measured so far and, on a CPU, from each kernel's time inside the round's built model less its
ceiling (foundation.job_driver.in_model_times), so later rounds go where the model loses its time.
`TuningInRounds.run` is the loop, for a mode that tunes a round and returns (the embedded farm,
farm.tuning_rounds). The coordinator's rounds are tuned by agents and end in an event, so it calls
`advance` once when the job is planned and once when a round's shards are all done
(coordinator.job_rounds): the loop's body is the same call, and a restarted coordinator carries on
from the outcome stored with the job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.tuning_rounds import RoundResult, Stop, UntilRequest, round_budgets, verdict
from foundation.job_driver import steps
from foundation.job_driver.tuning_rounds import RoundJudge

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.compile import TuningTask
    from foundation.domain.trial_plan import TrialPlan
    from foundation.domain.weights_layout import WeightsLayout
    from foundation.job_driver.in_model_times import InModelTimes
    from foundation.meta_schedule.tuner import TuningBudget
    from foundation.models.loaded import LoadedModel

logger = logging.getLogger("farm.job")


@dataclass(frozen=True)
class TunedRound:
    """How a mode's tuning of one round went."""

    trials: int  # measured in the round
    per_task: list[int]  # each task's trials in the round


@dataclass
class TuningInRounds:
    """One job's rounds: its tasks and budget (the plan step's), the model they build and the goal's judge."""

    until: UntilRequest
    tasks: Sequence["TuningTask"]
    budget: "TuningBudget"
    loaded: "LoadedModel"
    target: "tvm.target.Target"
    form: "WeightsLayout"
    judge: RoundJudge
    database: Callable[[], Any]  # the registry's records as MetaSchedule reads them, as they are now
    # Held while building and planning (the coordinator's TVM IR lock: its other threads build too).
    ir_lock: AbstractContextManager = field(default_factory=nullcontext)
    library: bytes | None = None  # the model built by the last `advance` that judged a round
    # Plan the rounds after the first by each task's time in the built model (CPU targets).
    time_in_model: bool = True
    in_model: "InModelTimes | None" = None  # the last judged round's

    @property
    def slices(self) -> list[int]:
        """Each round's trials."""
        return round_budgets(self.budget.max_trials_global, self.until.round_trials)

    def advance(self, outcome: RoundsOutcome, spent: Sequence[int], tuned_trials: int | None = None) \
            -> "TrialPlan | None":
        """Judge the round just tuned (``tuned_trials`` measured in it; None: none to judge), then plan the
        next round and add it to ``outcome.planned``; None once the rounds stop (``outcome.stopped`` says
        why). ``spent``: each task's trials over the rounds so far, the one just tuned too."""
        from foundation.meta_schedule import tuner
        from foundation.meta_schedule.tuner import TuningBudget

        database = self.database()
        self.library = None
        left = self.budget.max_trials_global - sum(spent)
        if tuned_trials is not None:
            with self.ir_lock:
                self.library = steps.tuned_library(self.loaded, self.target, database, self.form)
            timing = self.judge.judge(self.library, self.target.kind.name)
            outcome.rounds.append(RoundResult(tuned_trials, timing, tuner.estimated_ms(self.tasks, database)))
            outcome.stopped = verdict(outcome.rounds, self.until.patience, left)
            if outcome.stopped is None:
                self.in_model = self._time_in_model()
        if outcome.stopped is not None:
            return None
        slices = self.slices
        number = len(outcome.rounds)  # rounds judged: the next one's slice
        if number >= len(slices):
            outcome.stopped = Stop.BUDGET
            return None
        budget = TuningBudget(slices[number], self.budget.max_trials_per_task, self.budget.num_trials_per_iter)
        in_model = self.in_model
        with self.ir_lock:
            plan = tuner.trial_plan(self.tasks, budget, database, spent=spent,
                                    in_model_ms=in_model.task_ms if in_model else None,
                                    ceiling_ms=in_model.ceiling_ms if in_model else None)
        if plan.total == 0:  # every task is at its cap
            outcome.stopped = Stop.BUDGET
            return None
        outcome.planned.append(list(plan.trials))
        return plan

    def _time_in_model(self) -> "InModelTimes | None":
        """Each task's time in the round's built model and its ceiling; None off a CPU, or where it
        could not be timed (the plan then goes by the records, as the first round's does)."""
        if not self.time_in_model or self.library is None or self.target.kind.name != "llvm":
            return None
        from foundation.hardware.device_features import DEVICE_KEY
        from foundation.hardware.fingerprint import local_fingerprint
        from foundation.job_driver.in_model_times import in_model_times

        try:
            device = local_fingerprint("llvm").details.get(DEVICE_KEY) or {}
            with self.ir_lock:
                return in_model_times(self.library, self.loaded, self.target, self.form, self.tasks,
                                      self.judge.seed, device)
        except Exception as err:  # the rounds go on, planned from the records alone
            logger.warning("warning: the round's kernels could not be timed in the model (%s: %s); the next "
                           "round is planned from the records alone", type(err).__name__, err)
            return None

    def run(self, outcome: RoundsOutcome, tune_round: Callable[[int, "TrialPlan"], TunedRound | None],
            on_judged: Callable[[int], None] = lambda number: None) -> None:
        """Tune in rounds until they stop, each round tuned by ``tune_round(number, plan)`` (None: cancelled,
        and the rounds end there, the round not judged); ``on_judged(number)`` after each round is judged."""
        spent = [0] * len(self.tasks)
        plan = self.advance(outcome, spent)
        while plan is not None:
            number = len(outcome.planned)
            tuned = tune_round(number, plan)
            if tuned is None:
                outcome.planned.pop()  # a round not judged is not among the rounds' plans
                outcome.stopped, outcome.cancelled = None, True
                return
            spent = [s + t for s, t in zip(spent, tuned.per_task)]
            plan = self.advance(outcome, spent, tuned.trials)
            on_judged(number)
