"""How a job tuned in rounds (`farm submit --until`) went, round by round, and how it ended: the job's note
`until` (foundation.domain.job_spec), which a coordinator carries on from after a restart.

Stored form (`RoundsOutcome.to_json`): `goal` (Goal.describe), `goal_ms`, `reference_latency_ms`
(ReferenceLatency, or None), `reference_check` (ReferenceCheck, or None), `stopped` (reached, patience,
budget, cancelled, or None while tuning), `latency_ms` and `summary` (for people reading the row; never read
back), `rounds` (each judged round: `trials`, `latency_ms`, `estimated_ms`, `timing` (Comparison.to_json) and
`planned`, its trials per task) and `planned` (every round's plan, the one being tuned too).

Reading (`from_json`) is strict: a field none of these is a ValueError, one missing a KeyError. Rows from the
first `--until` read with these documented defaults for what they lack: `planned` the rounds' own plans,
`reference_check` None, a round's `timing` its `latency_ms` as median and upper quartile against `goal_ms`,
0 blocks, beaten only by the last round of rounds that reached the goal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from foundation.domain.json_fields import check_object, flag
from foundation.domain.tuning_rounds import ONNXRUNTIME, Comparison, Goal, RoundResult, Stop, stored_goal
from foundation.units import milliseconds

STOP_TEXT = {
    Stop.REACHED: "reached",
    Stop.PATIENCE: "not reached, no improvement",
    Stop.BUDGET: "not reached, budget spent",
}
CANCELLED = "cancelled"


@dataclass(frozen=True)
class ReferenceLatency:
    """onnxruntime's latency on this box, timed before the first round when it is the goal."""

    mean_ms: float
    median_ms: float
    std_ms: float
    runs: int
    warmup: int

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean_ms, "median": self.median_ms, "std": self.std_ms, "runs": self.runs,
                "warmup": self.warmup}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "ReferenceLatency":
        check_object(value, "reference_latency_ms", {"mean", "median", "std", "runs", "warmup"})
        return ReferenceLatency(float(value["mean"]), float(value["median"]), float(value["std"]),
                                int(value["runs"]), int(value["warmup"]))


@dataclass(frozen=True)
class ReferenceCheck:
    """onnxruntime's outputs against TVM's untuned build of the same model, weights and inputs, and the
    tolerances they were held to (foundation.runtime.onnx_reference)."""

    passed: bool
    max_abs_err: float
    rtol: float
    atol_scale: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "max_abs_err": self.max_abs_err, "rtol": self.rtol,
                "atol_scale": self.atol_scale, **({"detail": self.detail} if self.detail else {})}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "ReferenceCheck":
        check_object(value, "reference_check", {"passed", "max_abs_err", "rtol", "atol_scale", "detail"})
        return ReferenceCheck(flag(value["passed"], "reference_check.passed"), float(value["max_abs_err"]),
                              float(value["rtol"]), float(value["atol_scale"]), str(value.get("detail") or ""))


@dataclass
class RoundsOutcome:
    """How a job tuned in rounds went, round by round, and how it ended; filled in as the rounds go."""

    goal: Goal
    goal_ms: float  # onnxruntime's median timed before the first round, or the latency given
    reference: ReferenceLatency | None = None  # onnxruntime's, when it is the goal
    reference_check: ReferenceCheck | None = None  # onnxruntime's outputs against TVM's untuned build
    rounds: list[RoundResult] = field(default_factory=list)
    planned: list[list[int]] = field(default_factory=list)  # each round's trials per task
    stopped: Stop | None = None  # None: cancelled, or not ended yet
    cancelled: bool = False

    @property
    def latency_ms(self) -> float | None:
        return self.rounds[-1].latency_ms if self.rounds else None

    @property
    def ending(self) -> str | None:
        """How the rounds ended, as stored: a Stop's value, cancelled, or None while they go on."""
        return self.stopped.value if self.stopped else CANCELLED if self.cancelled else None

    def describe_goal(self) -> str:
        if self.goal.reference != ONNXRUNTIME:
            return self.goal.describe()
        last = self.rounds[-1].timing.goal_ms if self.rounds else self.goal_ms
        return f"onnxruntime's {milliseconds(last)}"

    def summary(self) -> str:
        """One line: how it ended, with the figures."""
        goal = self.describe_goal()
        trials = sum(r.trials for r in self.rounds)
        done = f"after {len(self.rounds)} round{'s' * (len(self.rounds) != 1)} ({trials} trials)"
        if self.cancelled:
            return f"cancelled {done}; goal {goal}"
        if self.stopped is None:
            return f"tuning in rounds until {goal}: {done} so far"
        if not self.rounds:
            return f"{STOP_TEXT[self.stopped]}: no round was tuned; goal {goal}"
        timing = self.rounds[-1].timing
        ran = (f"the tuned model ran in {milliseconds(timing.candidate_ms)} here (upper quartile "
               f"{milliseconds(timing.candidate_upper_ms)}" + (f", faster in {timing.blocks_won} of {timing.blocks} "
                                                      "interleaved blocks" if timing.blocks_won is not None else "")
               + ")")
        if self.stopped is Stop.REACHED:
            return f"reached: {ran}, beating {goal}, {done}"
        why = ("the estimated latency did not improve by 1% for the last rounds" if self.stopped is Stop.PATIENCE
               else "the budget is spent")
        return f"{STOP_TEXT[self.stopped]}: {ran}, not beating {goal}, {done}; {why}"

    def to_json(self) -> dict[str, Any]:
        return {
            "goal": self.goal.describe(),
            "goal_ms": self.goal_ms,
            "reference_latency_ms": self.reference.to_json() if self.reference else None,
            "reference_check": self.reference_check.to_json() if self.reference_check else None,
            "stopped": self.ending,
            "latency_ms": self.latency_ms,
            "summary": self.summary(),
            "rounds": [{"trials": r.trials, "latency_ms": r.latency_ms, "estimated_ms": r.estimated_ms,
                        "timing": r.timing.to_json(), "planned": planned}
                       for r, planned in zip(self.rounds, self.planned)],
            # Every round's plan, the one being tuned too (a coordinator carries on from it).
            "planned": self.planned,
        }

    @staticmethod
    def from_json(value: dict[str, Any]) -> "RoundsOutcome":
        """Its `to_json`, read strictly, with the module's documented defaults for rows that lack a field."""
        check_object(value, "until", {"goal", "goal_ms", "reference_latency_ms", "reference_check", "stopped",
                                "latency_ms", "summary", "rounds", "planned"})
        goal_ms = float(value["goal_ms"])
        stopped = value.get("stopped")
        if stopped is not None and stopped != CANCELLED and stopped not in {s.value for s in Stop}:
            raise ValueError(f"until.stopped {stopped!r} is none of {', '.join(s.value for s in Stop)}, {CANCELLED}")
        stop = Stop(stopped) if stopped not in (None, CANCELLED) else None
        rounds = value.get("rounds") or []
        reference, check = value.get("reference_latency_ms"), value.get("reference_check")
        return RoundsOutcome(
            goal=stored_goal(value["goal"], goal_ms),
            goal_ms=goal_ms,
            reference=ReferenceLatency.from_json(reference) if reference else None,
            reference_check=ReferenceCheck.from_json(check) if check else None,
            rounds=[_round(r, goal_ms, stop is Stop.REACHED and i == len(rounds) - 1) for i, r in enumerate(rounds)],
            planned=[[int(t) for t in p] for p in (value["planned"] if "planned" in value
                                                    else [r["planned"] for r in rounds])],
            stopped=stop,
            cancelled=stopped == CANCELLED,
        )


_TIMING_KEYS = (("candidate_ms", "median_ms"), ("candidate_upper_ms", "upper_quartile_ms"), ("goal_ms", "goal_ms"),
                ("blocks", "blocks"), ("blocks_won", "blocks_won"), ("beats", "beats"))


def _round(value: dict[str, Any], goal_ms: float, reached: bool) -> RoundResult:
    """One judged round as stored; one from before rounds were timed in blocks has only its latency."""
    check_object(value, "until.rounds", {"trials", "latency_ms", "estimated_ms", "timing", "planned"})
    estimated = value["estimated_ms"]
    estimated_ms = float(estimated) if estimated is not None else None
    if "timing" not in value:
        latency = float(value["latency_ms"])
        return RoundResult(int(value["trials"]), Comparison(latency, latency, goal_ms, 0, None, reached), estimated_ms)
    timing = value["timing"]
    check_object(timing, "until.rounds.timing", {stored for _, stored in _TIMING_KEYS})
    won = timing["blocks_won"]
    return RoundResult(int(value["trials"]), Comparison(
        float(timing["median_ms"]), float(timing["upper_quartile_ms"]), float(timing["goal_ms"]),
        int(timing["blocks"]), int(won) if won is not None else None, flag(timing["beats"], "timing.beats")),
        estimated_ms)
