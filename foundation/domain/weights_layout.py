"""Which form a library's weights take: as the model gives them, or prepacked for the CPU's kernels.

A prepacked library is tuned on TIR whose weight buffers are marked layout-free, so
MetaSchedule may rewrite their layout (blocked for the kernel's vector loops); the library
then carries a `main_transform_params` function that rearranges plain weights once, at
load time. The tuned workloads are different TIR from the plain ones, so the two forms have
their own records and their own artifacts, and one is never a hit for the other.

Only CPU (llvm) libraries are prepacked: TVM's GPU pipeline has no layout rewrite.
"""

from __future__ import annotations

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


def tuned_form(job_options: dict) -> WeightsLayout:
    """The form a job tuned, from its options; jobs from before the choice existed tuned plain."""
    return WeightsLayout(job_options.get("weights_layout") or WeightsLayout.PLAIN.value)


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
