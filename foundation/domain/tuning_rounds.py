"""Tuning in rounds until the model is good enough (`farm submit --until`), pure: figures in, a verdict out.

A job with a goal tunes a slice of its budget per round; after each round the model is built
with the best records so far and timed on this box. It stops when

- the built model beats the goal (``reached``, see `compare`): onnxruntime on this box, timed
  interleaved with the model after every round, or a latency the user gave;
- the estimated latency (each task's best measured time x its calls) has not improved by
  `MIN_IMPROVEMENT` for ``patience`` rounds in a row (``patience``); a round before which some
  task had no valid measurement counts as improving, since the estimate is not yet defined;
- the budget is spent (``budget``).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ONNXRUNTIME = "onnxruntime"
MIN_IMPROVEMENT = 0.01
DEFAULT_ROUNDS = 4
DEFAULT_PATIENCE = 2

_LATENCY = re.compile(r"^\s*(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>us|ms|s)\s*$", re.IGNORECASE)
_MS_PER_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


# The timing after each round: BLOCKS blocks of RUNS_PER_BLOCK runs of the model and of the
# reference, alternating which goes first, so load that comes and goes lands on both.
BLOCKS = 5
RUNS_PER_BLOCK = 4
UPPER_QUANTILE = 0.75


class Stop(enum.Enum):
    REACHED = "reached"
    PATIENCE = "patience"
    BUDGET = "budget"


@dataclass(frozen=True)
class Goal:
    """What `--until` asks for: onnxruntime's latency on this box, or a latency in ms."""

    reference: str  # ONNXRUNTIME, or "latency"
    latency_ms: float | None = None  # for "latency"

    def describe(self) -> str:
        return ONNXRUNTIME if self.reference == ONNXRUNTIME else f"{self.latency_ms:g} ms"

    def text(self) -> str:
        """What `parse_goal` reads back as this goal (to the nanosecond; `describe` rounds)."""
        if self.reference == ONNXRUNTIME:
            return ONNXRUNTIME
        return f"{self.latency_ms:.6f}".rstrip("0").rstrip(".") + "ms"


def parse_goal(text: str) -> Goal:
    """``onnxruntime``, or a latency such as ``20ms``, ``0.5 s`` or ``800us``; ValueError otherwise."""
    if text.strip().lower() == ONNXRUNTIME:
        return Goal(ONNXRUNTIME)
    match = _LATENCY.match(text)
    if not match:
        raise ValueError(f"--until {text!r} is neither onnxruntime nor a latency")
    latency_ms = float(match["value"]) * _MS_PER_UNIT[match["unit"].lower()]
    if not math.isfinite(latency_ms) or latency_ms <= 0:
        raise ValueError(f"--until {text!r} must be a latency above zero")
    return Goal("latency", latency_ms)


@dataclass(frozen=True)
class UntilRequest:
    """What `--until` asked for."""

    goal: Goal
    patience: int = DEFAULT_PATIENCE
    round_trials: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"goal": self.goal.describe(), "latency_ms": self.goal.latency_ms, "patience": self.patience,
                "round_trials": self.round_trials}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "UntilRequest":
        return UntilRequest(stored_goal(value["goal"], value.get("latency_ms")), int(value["patience"]),
                            value.get("round_trials"))


def stored_goal(described: str, latency_ms: float | None) -> Goal:
    """A goal as stored: its description and, for a latency, its milliseconds."""
    return Goal(ONNXRUNTIME) if described == ONNXRUNTIME else Goal("latency", float(latency_ms or 0.0))


def round_budgets(total: int, round_trials: int | None = None, rounds: int = DEFAULT_ROUNDS) -> list[int]:
    """The trials of each round: ``round_trials`` each (default: the budget in ``rounds`` about
    equal slices), the last one what is left; they sum to ``total``."""
    if total < 1:
        raise ValueError(f"a budget of {total} trials cannot be tuned in rounds")
    size = round_trials if round_trials is not None else -(-total // max(rounds, 1))
    if size < 1:
        raise ValueError(f"a round of {size} trials measures nothing")
    full, rest = divmod(total, size)
    return [size] * full + ([rest] if rest else [])


@dataclass(frozen=True)
class Comparison:
    """The built model timed against the goal after a round: what `compare` decided, with its figures."""

    candidate_ms: float  # the model's median over every timed run
    candidate_upper_ms: float  # its upper quartile (UPPER_QUANTILE)
    goal_ms: float  # the reference's median over every timed run, or the latency given
    blocks: int
    blocks_won: int | None  # blocks whose model median is below the reference's; None for a given latency
    beats: bool

    def to_json(self) -> dict:
        return {"median_ms": self.candidate_ms, "upper_quartile_ms": self.candidate_upper_ms,
                "goal_ms": self.goal_ms, "blocks": self.blocks, "blocks_won": self.blocks_won, "beats": self.beats}


def compare(candidate: Sequence[Sequence[float]], reference: Sequence[Sequence[float]] | None = None,
            goal_ms: float | None = None) -> Comparison:
    """Whether the model beats the goal, from its timed runs in blocks, and the reference's
    (interleaved with them, block for block) or a latency ``goal_ms``.

    One noisy median against another would flip on a burst of load; the model beats only when
    - its upper quartile over all runs is at or below the goal (the reference's median over all
      its runs, or ``goal_ms``): three runs in four at least as fast, not one typical run; and,
    - against a reference, its median is below the reference's in more than half of the blocks
      (a paired comparison: load that changed during the timing touched both sides of a block).
    """
    runs = [x for block in candidate for x in block]
    if not runs:
        raise ValueError("the model was not timed")
    upper = quantile(runs, UPPER_QUANTILE)
    if reference is None:
        if goal_ms is None:
            raise ValueError("a goal needs a reference's timings or a latency")
        return Comparison(quantile(runs, 0.5), upper, goal_ms, len(candidate), None, upper <= goal_ms)
    if len(reference) != len(candidate):
        raise ValueError(f"{len(candidate)} blocks of the model against {len(reference)} of the reference")
    reference_runs = [x for block in reference for x in block]
    if not reference_runs or not all(reference):
        raise ValueError("the reference was not timed in every block")
    goal = quantile(reference_runs, 0.5)
    won = sum(quantile(c, 0.5) < quantile(r, 0.5) for c, r in zip(candidate, reference))
    return Comparison(quantile(runs, 0.5), upper, goal, len(candidate), won,
                      upper <= goal and won * 2 > len(candidate))


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile, interpolated between the nearest ranks (numpy's default, 'linear')."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class RoundResult:
    """What one round ended with."""

    trials: int  # measured in this round
    timing: Comparison  # the built model, timed on this box against the goal
    estimated_ms: float | None  # each task's best measured time x its calls; None while a task has none

    @property
    def latency_ms(self) -> float:
        return self.timing.candidate_ms


def verdict(rounds: Sequence[RoundResult], patience: int, trials_left: int) -> Stop | None:
    """Whether to stop after the last of ``rounds``, and why; None to tune another round."""
    if not rounds:
        return None
    if rounds[-1].timing.beats:
        return Stop.REACHED
    if trials_left <= 0:
        return Stop.BUDGET
    if patience > 0 and len(rounds) > patience and not _improved(rounds, patience):
        return Stop.PATIENCE
    return None


def _improved(rounds: Sequence[RoundResult], patience: int) -> bool:
    """Whether any of the last ``patience`` rounds lowered the estimate by MIN_IMPROVEMENT."""
    for i in range(len(rounds) - patience, len(rounds)):
        before, after = rounds[i - 1].estimated_ms, rounds[i].estimated_ms
        if before is None or after is None or after < before * (1 - MIN_IMPROVEMENT):
            return True
    return False
