"""Tuning in rounds until the model is good enough (`farm submit --until`): the goal and how a round's model
is judged against it, the same for the embedded farm and the coordinator; how the rounds went is
foundation.domain.rounds_outcome's RoundsOutcome.

The rule is foundation.domain.tuning_rounds'. Here is its I/O: onnxruntime set up on the model's
ONNX form (the file it came from, or the zoo's Relax graph exported op for op,
foundation.models.onnx_export) and checked against TVM's untuned build before it is trusted;
then, after each round, the built model and onnxruntime timed in alternating blocks on this box.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from foundation.domain.rounds_outcome import ReferenceCheck, ReferenceLatency, RoundsOutcome
from foundation.domain.tuning_rounds import (
    BLOCKS,
    ONNXRUNTIME,
    RUNS_PER_BLOCK,
    Comparison,
    Goal,
    UntilRequest,
    compare,
)
from foundation.errors import BadInput

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.models.loaded import LoadedModel
    from foundation.runtime.onnx_reference import OnnxRuntimeModel

TIMING_WARMUP = 2


def check_until(until: UntilRequest) -> None:
    """Refuse, before any work, a goal this box cannot measure."""
    if until.goal.reference == ONNXRUNTIME:
        from foundation.runtime.onnx_reference import require_onnxruntime

        require_onnxruntime()


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
        from foundation.hardware.fingerprint import available_cores
        from foundation.runtime.interleaved_timing import time_interleaved
        from foundation.runtime.library_runner import LoadedLibrary

        inputs = self.loaded.make_inputs(self.seed)
        # On every core, as validation times a library: the pool is the calling thread's, and a
        # farm.load(..., threads=1) on this thread (a notebook's) would have left it on one.
        model = LoadedLibrary(library, target_kind, threads=None if target_kind == "cuda" else available_cores())
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
    outcome = RoundsOutcome(until.goal, latency.median_ms, ReferenceLatency.from_json(latency.to_json()),
                            ReferenceCheck.from_json(check.to_json()))
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

