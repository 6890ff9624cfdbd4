"""Replay a schedule of one workload on another workload's own design space (trace transfer).

A trace found for workload A is not applied to workload B as it stands: its tile sizes fit A's
loop extents, and it carries the constants of the target it was tuned for (parallel extents,
vector widths). Instead B's own design space is generated for this target, the space whose
instructions are A's instruction for instruction is taken, and A's random decisions are
copied onto it: tile factors that do not divide B's extents are refitted (`refit_tile`),
categorical choices over other candidates and compute locations that do not apply are left
to B's own sample. The result is checked the way MetaSchedule checks its own candidates
(every post-processor must accept it) before anyone measures it: one structurally
incompatible seed handed to the evolutionary search stops candidate generation for the whole
task (shared/notes/warm-starts.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

_TILE = "SamplePerfectTile"
_CATEGORICAL = "SampleCategorical"
_COMPUTE_LOCATION = "SampleComputeLocation"


def refit_tile(donor: Sequence[int], extent: int) -> list[int]:
    """A donor's tile factors (outermost first) made to multiply to ``extent``.

    From the innermost factor outwards, each keeps the largest part of itself that still
    divides what is left; the outermost takes the rest. Inner tiles (vector and cache
    blocking) are what carry over between shapes, so they are kept first; the notes' example,
    [2, 64, 1, 1] onto 200, becomes [25, 8, 1, 1] rather than TVM's own repair [1, 200, 1, 1].
    """
    left = extent
    inner: list[int] = []
    for factor in reversed(list(donor)[1:]):
        kept = math.gcd(int(factor), left)
        inner.append(kept)
        left //= kept
    return [left, *reversed(inner)]


class Transplanter:
    """Trace transfer onto workloads of one target; design spaces are generated once per workload."""

    def __init__(self, target: "tvm.target.Target", space_generator: Any = "post-order-apply"):
        self.target = target
        self.space_generator = space_generator
        self._spaces: dict[int, tuple[Any, list["Trace"]]] = {}

    def _context(self, mod: "tvm.IRModule"):
        import tvm_ffi

        key = int(tvm_ffi.structural_hash(mod))
        cached = self._spaces.get(key)
        if cached is None:
            from tvm.s_tir import meta_schedule as ms

            context = ms.TuneContext(mod=mod, target=self.target, space_generator=self.space_generator,
                                     task_name="transplant", num_threads=1)
            spaces = [s.trace.simplified(remove_postproc=True) for s in context.generate_design_space()]
            cached = self._spaces[key] = (context, spaces)
        return cached

    def apply(self, donor_trace: "Trace", mod: "tvm.IRModule", seed: int = 1) -> "Schedule | None":
        """``donor_trace`` replayed on ``mod``'s design space and post-processed, or None when no
        space of ``mod`` has its instructions or the result is not a valid program."""
        from tvm.s_tir.schedule import Trace

        context, spaces = self._context(mod)
        donor = donor_trace.simplified(remove_postproc=True)
        kinds = [i.kind.name for i in donor.insts]
        for space in spaces:
            if [i.kind.name for i in space.insts] != kinds:
                continue
            copied, sampled_locations = self._decisions(space, donor)
            # Compute locations index loops, which other shapes may not have: then B's own.
            for decisions in (copied, {**copied, **sampled_locations}):
                schedule = self._postprocessed(context, Trace(space.insts, decisions), seed)
                if schedule is not None:
                    return schedule
        return None

    @staticmethod
    def _decisions(space: "Trace", donor: "Trace") -> tuple[dict, dict]:
        copied: dict = {}
        locations: dict = {}
        for inst, donor_inst in zip(space.insts, donor.insts):
            own = space.get_decision(inst)
            theirs = donor.get_decision(donor_inst)
            if own is None:
                continue
            name = inst.kind.name
            if theirs is None:
                copied[inst] = own
            elif name == _TILE:
                own_tile = [int(v) for v in own]
                copied[inst] = refit_tile([int(v) for v in theirs], math.prod(own_tile)) \
                    if len(theirs) == len(own_tile) else own_tile
            elif name == _CATEGORICAL:
                same_choices = [int(c) for c in inst.attrs[0]] == [int(c) for c in donor_inst.attrs[0]]
                copied[inst] = theirs if same_choices else own
            elif name == _COMPUTE_LOCATION:
                copied[inst] = theirs
                locations[inst] = own
            else:
                copied[inst] = theirs
        return copied, locations

    @staticmethod
    def _postprocessed(context, trace: "Trace", seed: int) -> "Schedule | None":
        from tvm.s_tir import Schedule

        schedule = Schedule(context.mod, seed=max(1, seed), debug_mask="all")
        try:
            trace.apply_to_schedule(schedule, remove_postproc=True)
            schedule.enter_postproc()
            for postproc in context.space_generator.postprocs:
                if not postproc.apply(schedule):
                    return None
        except Exception:  # a decision that does not apply to this workload: not a seed
            return None
        return schedule
