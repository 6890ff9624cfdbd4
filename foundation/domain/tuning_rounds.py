"""Tuning in rounds until the model is good enough (`farm submit --until`), pure: figures in, a verdict out.

A job with a goal tunes a slice of its budget per round; after each round the model is built
with the best records so far and timed on this box. It stops when

- the built model is at least as fast as the goal (``reached``): onnxruntime's latency on this
  box, timed once before the first round, or a latency the user gave;
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

ONNXRUNTIME = "onnxruntime"
MIN_IMPROVEMENT = 0.01
DEFAULT_ROUNDS = 4
DEFAULT_PATIENCE = 2

_LATENCY = re.compile(r"^\s*(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>us|ms|s)\s*$", re.IGNORECASE)
_MS_PER_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


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
class RoundResult:
    """What one round ended with."""

    trials: int  # measured in this round
    latency_ms: float  # the built model, timed on this box (median)
    estimated_ms: float | None  # each task's best measured time x its calls; None while a task has none


def verdict(rounds: Sequence[RoundResult], goal_ms: float, patience: int, trials_left: int) -> Stop | None:
    """Whether to stop after the last of ``rounds``, and why; None to tune another round."""
    if not rounds:
        return None
    if rounds[-1].latency_ms <= goal_ms:
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
