"""Which form a library's weights take: as the model gives them, or prepacked for the CPU's kernels.

A prepacked library is tuned on TIR whose weight buffers are marked layout-free, so
MetaSchedule may rewrite their layout (blocked for the kernel's vector loops); the library
then carries a `main_transform_params` function that rearranges plain weights once, at
load time. The tuned workloads are different TIR from the plain ones, so the two forms have
their own records and their own artifacts, and one is never a hit for the other.

Only CPU (llvm) libraries are prepacked: TVM's GPU pipeline has no layout rewrite.

`auto` is the CPU default unless the registry's records cover the model in another form clearly
better (`choose_by_coverage`): records measured in one form (TVM's own logs are plain) are no
hits, seeds or reuse for the other, so a user's logs would otherwise go unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from foundation.errors import BadInput


class WeightsLayout(str, Enum):
    PLAIN = "plain"
    PREPACKED = "prepacked"
    # Prepacked weights and the convolutions' activations in blocked channels (NCHW8c, or NCHW16c
    # with AVX-512) between the first convolution and the last (foundation.blocked_activations).
    PREPACKED_NCHWC = "prepacked-nchwc"

    @property
    def prepacks(self) -> bool:
        return self is not WeightsLayout.PLAIN

    @property
    def blocks_activations(self) -> bool:
        return self is WeightsLayout.PREPACKED_NCHWC


AUTO = "auto"
REQUESTS = (AUTO, *(form.value for form in WeightsLayout))
PREPACKING_TARGET_KINDS = ("llvm",)
# What `auto` means on a CPU; docs/benchmarks.md ("Weight prepacking", "blocked activations") has
# the measurements. A model without convolutions tunes the same TIR in both prepacked forms.
CPU_DEFAULT = WeightsLayout.PREPACKED_NCHWC
# The function of a prepacked library that turns plain weights into the ones `main` takes
# (the name TVM's LiftTransformParams gives it for `main`).
TRANSFORM_PARAMS_FUNCTION = "main_transform_params"


def check_request(request: str) -> str:
    """A user's `--weights-layout`, refused early when it is none of REQUESTS."""
    if request not in REQUESTS:
        raise BadInput(f"unknown weights layout {request!r}", f"use one of {', '.join(REQUESTS)}")
    return request


def weights_layout_for(request: str, target_kind: str) -> WeightsLayout:
    """The form a job for ``target_kind`` tunes and builds, from what the user asked for."""
    check_request(request)
    if target_kind not in PREPACKING_TARGET_KINDS:
        if request != AUTO and WeightsLayout(request).prepacks:
            raise BadInput(f"weights cannot be prepacked for a {target_kind} target",
                           "prepacking is for CPU (llvm) targets: use --weights-layout plain or auto")
        return WeightsLayout.PLAIN
    if request == AUTO:
        return CPU_DEFAULT
    return WeightsLayout(request)


# The forms `auto` may pick on a CPU, in order of preference when their records cover a model alike.
CPU_FORMS = (WeightsLayout.PREPACKED_NCHWC, WeightsLayout.PREPACKED, WeightsLayout.PLAIN)
# How much more of the model's estimated latency another form's records must cover than the
# default's before `auto` takes it: a form nearly as covered is not worth leaving the faster default for.
COVERAGE_MARGIN = 0.25


@dataclass(frozen=True)
class LayoutChoice:
    """The form a job tunes and why; ``coverage`` is each form's share of the model's estimated
    latency whose tasks have valid measured records in the job's scope (only the forms looked at)."""

    chosen: WeightsLayout
    why: str
    coverage: Mapping[str, float] | None = None

    def to_json(self) -> dict:
        return {"chosen": self.chosen.value, "why": self.why,
                "coverage": {form: round(share, 4) for form, share in self.coverage.items()}
                if self.coverage is not None else None}

    @staticmethod
    def from_json(value: dict) -> "LayoutChoice":
        return LayoutChoice(WeightsLayout(value["chosen"]), value["why"], value.get("coverage"))


def auto_forms(target_kind: str) -> tuple[WeightsLayout, ...]:
    """The forms an `auto` request may end in for ``target_kind``, the default first."""
    return CPU_FORMS if target_kind in PREPACKING_TARGET_KINDS else (WeightsLayout.PLAIN,)


def asked(request: str, target_kind: str) -> LayoutChoice:
    """The choice for a request that names its form, or an `auto` one nothing moved off the default."""
    chosen = weights_layout_for(request, target_kind)
    why = (f"asked for with --weights-layout {request}" if request != AUTO
           else f"what auto means for {target_kind} targets")
    return LayoutChoice(chosen, why)


def choose_by_coverage(default: WeightsLayout, coverage: Mapping[WeightsLayout, float]) -> LayoutChoice:
    """`auto`'s form from each form's covered share of the model's estimated latency (0..1).

    The default stays unless another form covers at least COVERAGE_MARGIN more of the model;
    among such forms the most covered wins, ties going to the earlier of CPU_FORMS."""
    shares = {form.value: float(share) for form, share in coverage.items()}
    mine = coverage.get(default, 0.0)
    order = [f for f in CPU_FORMS if f in coverage] + [f for f in coverage if f not in CPU_FORMS]
    best = max(order, key=lambda f: (coverage[f], -order.index(f)))
    if best is not default and coverage[best] - mine >= COVERAGE_MARGIN:
        return LayoutChoice(best, f"the registry's records cover {coverage[best]:.0%} of the model's estimated "
                                  f"latency in the {best.value} form and {mine:.0%} in {default.value}, "
                                  f"auto's default: tuning {best.value} to use them", shares)
    return LayoutChoice(default, f"auto's default for CPUs: the registry's records cover {mine:.0%} of the model's "
                                 f"estimated latency in it, no other form {COVERAGE_MARGIN:.0%} more", shares)
