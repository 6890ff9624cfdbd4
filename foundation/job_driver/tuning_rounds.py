"""Tuning in rounds until the model is good enough (`farm submit --until`): the goal, how a round's model
is judged against it, and how the rounds ended; the same for the embedded farm and the coordinator.

The rule is foundation.domain.tuning_rounds'. Here is its I/O: onnxruntime set up on the model's
ONNX form (the file it came from, or the zoo's Relax graph exported op for op,
foundation.models.onnx_export) and checked against TVM's untuned build before it is trusted;
then, after each round, the built model and onnxruntime timed in alternating blocks on this box.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from foundation.domain.tuning_rounds import (
    BLOCKS,
    ONNXRUNTIME,
    RUNS_PER_BLOCK,
    Comparison,
    Goal,
    RoundResult,
    Stop,
    UntilRequest,
    compare,
    stored_goal,
)
from foundation.errors import BadInput
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.models.loaded import LoadedModel
    from foundation.runtime.library_runner import Latency
    from foundation.runtime.onnx_reference import Agreement, OnnxRuntimeModel

TIMING_WARMUP = 2
STOP_TEXT = {
    Stop.REACHED: "reached",
    Stop.PATIENCE: "not reached, no improvement",
    Stop.BUDGET: "not reached, budget spent",
}


def check_until(until: UntilRequest) -> None:
    """Refuse, before any work, a goal this box cannot measure."""
    if until.goal.reference == ONNXRUNTIME:
        from foundation.runtime.onnx_reference import require_onnxruntime

        require_onnxruntime()


@dataclass
class RoundsOutcome:
    """How a job tuned in rounds went, round by round, and how it ended."""

    goal: Goal
    goal_ms: float  # onnxruntime's median timed before the first round, or the latency given
    reference: "Latency | None" = None  # onnxruntime's, when it is the goal
    reference_check: "Agreement | None" = None  # onnxruntime's outputs against TVM's untuned build
    rounds: list[RoundResult] = field(default_factory=list)
    planned: list[list[int]] = field(default_factory=list)  # each round's trials per task
    stopped: Stop | None = None  # None: cancelled, or not ended yet
    cancelled: bool = False

    @property
    def latency_ms(self) -> float | None:
        return self.rounds[-1].latency_ms if self.rounds else None

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
            "stopped": self.stopped.value if self.stopped else "cancelled" if self.cancelled else None,
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
        """The outcome a coordinator stored with the job (its `to_json`), to carry on from."""
        from foundation.runtime.library_runner import Latency
        from foundation.runtime.onnx_reference import Agreement

        reference = value.get("reference_latency_ms")
        check = value.get("reference_check")
        stopped = value.get("stopped")
        rounds = value.get("rounds") or []
        return RoundsOutcome(
            goal=stored_goal(value["goal"], value["goal_ms"]),
            goal_ms=float(value["goal_ms"]),
            reference=Latency(reference["mean"], reference["median"], reference["std"], reference["runs"],
                              reference["warmup"]) if reference else None,
            reference_check=Agreement(check["passed"], check["max_abs_err"], check.get("detail", ""))
            if check else None,
            rounds=[RoundResult(r["trials"], Comparison(**{k: r["timing"][k2] for k, k2 in _TIMING_KEYS}),
                                r["estimated_ms"]) for r in rounds],
            planned=[list(p) for p in value.get("planned", [r["planned"] for r in rounds])],
            stopped=Stop(stopped) if stopped in {s.value for s in Stop} else None,
            cancelled=stopped == "cancelled",
        )


_TIMING_KEYS = (("candidate_ms", "median_ms"), ("candidate_upper_ms", "upper_quartile_ms"), ("goal_ms", "goal_ms"),
                ("blocks", "blocks"), ("blocks_won", "blocks_won"), ("beats", "beats"))


class RoundJudge:
    """Times a round's built model on this box against the goal: onnxruntime, interleaved with it,
    or a latency. Made once per job; `reference_library` is the untuned build it was checked on."""

    def __init__(self, goal: Goal, goal_ms: float, onnxruntime: "OnnxRuntimeModel | None",
                 loaded: "LoadedModel", seed: int, reference_library: bytes | None = None):
        self.goal = goal
        self.goal_ms = goal_ms
        self.onnxruntime = onnxruntime
        self.loaded = loaded
        self.seed = seed
        self.reference_library = reference_library

    def judge(self, library: bytes, target_kind: str) -> Comparison:
        """The model built from ``library`` against the goal (foundation.domain.tuning_rounds.compare)."""
        from foundation.runtime.interleaved_timing import time_interleaved
        from foundation.runtime.library_runner import LoadedLibrary

        inputs = self.loaded.make_inputs(self.seed)
        model = LoadedLibrary(library, target_kind)
        model.set_weights(self.loaded.make_weights(self.seed))
        reference = self.onnxruntime.timer(inputs) if self.onnxruntime is not None else None
        mine, theirs = time_interleaved(model.timer(inputs), reference, BLOCKS, RUNS_PER_BLOCK, TIMING_WARMUP)
        return compare(mine, theirs, None if theirs is not None else self.goal_ms)


def set_up_goal(until: UntilRequest, loaded: "LoadedModel", target: "tvm.target.Target", seed: int,
                onnx_file: bytes | None) -> tuple[RoundsOutcome, RoundJudge]:
    """The goal of a job tuned in rounds, and its judge. For onnxruntime: its model (``onnx_file``,
    or the zoo model exported), refused with one line unless its outputs agree with TVM's untuned
    build on the job's inputs and weights, then timed once for the goal shown before tuning."""
    if until.goal.reference != ONNXRUNTIME:
        assert until.goal.latency_ms is not None
        outcome = RoundsOutcome(until.goal, until.goal.latency_ms)
        return outcome, RoundJudge(until.goal, until.goal.latency_ms, None, loaded, seed)
    from foundation.compile import build_library
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.onnx_reference import OnnxRuntimeModel, agreement

    check_until(until)
    what = f"{loaded.name}'s ONNX file" if onnx_file is not None else f"{loaded.name} exported to ONNX"
    session = OnnxRuntimeModel(onnx_file if onnx_file is not None else exported_onnx(loaded, seed),
                               [s.name for s in loaded.inputs], what)
    inputs, weights = loaded.make_inputs(seed), loaded.make_weights(seed)
    untuned = build_library(loaded, target, None)
    tvm_model = LoadedLibrary(untuned, target.kind.name)
    tvm_model.set_weights(weights)
    check = agreement(session(inputs), tvm_model(inputs))
    if not check.passed:
        raise BadInput(f"onnxruntime on {what} disagrees with TVM's untuned build (max abs err "
                       f"{check.max_abs_err:.3g}{'; ' + check.detail if check.detail else ''}): it cannot be the goal",
                       "give a latency instead: --until 20ms")
    latency = session.time(inputs)
    outcome = RoundsOutcome(until.goal, latency.median_ms, latency, check)
    return outcome, RoundJudge(until.goal, latency.median_ms, session, loaded, seed, untuned)


def exported_onnx(loaded: "LoadedModel", seed: int) -> bytes:
    """A zoo model as ONNX with the job's weights; an op without translation is refused with one line."""
    from foundation.models.onnx_export import to_onnx
    from foundation.models.relax_graph import Unsupported

    try:
        return to_onnx(loaded.mod, loaded.make_weights(seed)).SerializeToString()
    except Unsupported as err:
        raise BadInput(f"--until onnxruntime: {loaded.name} cannot be exported to ONNX ({err})",
                       "give a latency instead: --until 20ms") from None


def planned_so_far(planned: Sequence[Sequence[int]], tasks: int) -> list[int]:
    """Each task's trials over the rounds so far (what the next round's plan counts against caps)."""
    spent = [0] * tasks
    for trials in planned:
        spent = [s + t for s, t in zip(spent, trials)]
    return spent

