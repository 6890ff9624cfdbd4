"""Which cache state a CPU candidate is timed in: the one its kernel meets inside the model.

Inside a model a kernel's weights were evicted by the layers that ran since its last call; they
come from L3 or memory, while its activations were just written by the kernel before it and are
warm. Timed alone, back to back, everything is warm, and a schedule that streams weights badly
looks as fast as one that streams them well. The contexts:

- ``warm``: calls back to back for min_repeat_ms, everything cached (TVM's default).
- ``flushed``: every argument but the first flushed before each call (TVM's
  `enable_cpu_cache_flush`; FARM_CPU_CACHE_FLUSH=1): the weights, but also a second activation
  (a residual) and the output.
- ``weights``: only the weight buffers flushed before each call; the activations and the output
  stay as the previous call left them, as the model leaves them.
- ``producer``: every argument flushed, then the activation inputs read back into the caches,
  as a producer kernel leaves its output: the weights and the output cold, the activations warm.
- ``auto``: per task, ``weights`` when its weights outgrow the L2 (where the model's streaming
  from memory is what its time is made of), else ``warm`` (a small layer's weights are fetched
  once and hidden by its compute; back-to-back timing is the cheaper and steadier measurement).

Pure: buffer sizes and the fingerprint's cache sizes in, a context out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from foundation.errors import BadInput


class TimingContext(str, Enum):
    WARM = "warm"
    FLUSHED = "flushed"
    WEIGHTS = "weights"
    PRODUCER = "producer"
    AUTO = "auto"

    @property
    def flushes(self) -> bool:
        """Timed one call a repeat, each after a flush (not back to back)."""
        return self in (TimingContext.FLUSHED, TimingContext.WEIGHTS, TimingContext.PRODUCER)


# A/B tunes on two CPU kinds disagree on `auto` (slower on a Zen 4, faster on a Zen 5: docs/benchmarks.md),
# so the default stays TVM's.
DEFAULT_TIMING_CONTEXT = TimingContext.WARM
CONTEXTS = tuple(c.value for c in TimingContext)


def parse_timing_context(text: str, source: str) -> TimingContext:
    """``text`` as a context; BadInput naming ``source`` (an option or variable) otherwise."""
    try:
        return TimingContext(text.strip().lower())
    except ValueError:
        raise BadInput(f"{source}={text!r} is not a timing context",
                       f"use one of {', '.join(CONTEXTS)} (unset: {DEFAULT_TIMING_CONTEXT.value})") from None


@dataclass(frozen=True)
class BufferRoles:
    """A kernel's arguments by role, as positions in its parameter list, and their sizes in bytes."""

    weights: tuple[int, ...]
    activations: tuple[int, ...]  # inputs that are not weights
    outputs: tuple[int, ...]
    sizes: tuple[int, ...]  # bytes of each argument

    @property
    def weight_bytes(self) -> int:
        return sum(self.sizes[i] for i in self.weights)


@dataclass(frozen=True)
class TaskTiming:
    """How one task's candidates are timed, and why."""

    context: TimingContext  # never AUTO
    roles: BufferRoles
    why: str

    def to_json(self) -> dict:
        return {"context": self.context.value, "weights": list(self.roles.weights),
                "weight_bytes": self.roles.weight_bytes, "why": self.why}


def task_timing(requested: TimingContext, roles: BufferRoles, l2_kib: int | None) -> TaskTiming:
    """The context a task is timed in: ``requested``, or for ``auto`` the one its weights' size
    against the L2 (``l2_kib``; None: unknown, timed warm) says."""
    if requested is not TimingContext.AUTO:
        return TaskTiming(requested, roles, "asked for")
    size = roles.weight_bytes
    if l2_kib is None or l2_kib <= 0:
        return TaskTiming(TimingContext.WARM, roles, "the L2's size is unknown")
    if size > l2_kib * 1024:
        return TaskTiming(TimingContext.WEIGHTS, roles,
                          f"its weights ({size / 1024:.0f} KiB) exceed the L2 ({l2_kib} KiB)")
    return TaskTiming(TimingContext.WARM, roles, f"its weights ({size / 1024:.0f} KiB) fit in the L2 ({l2_kib} KiB)")
