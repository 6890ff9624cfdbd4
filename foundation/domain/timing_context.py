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
- ``l2-evicted``: the L2 evicted before each call by streaming a buffer of twice its size, then
  the activations read back: the weights come from the L3. A diagnosis more than a tuning context:
  it tells whether a kernel's loss in the model is the L3's or memory's (bench/in_model_ratio.py).
  For weights that outgrow the L2 it is warm's state again, since back-to-back calls already read
  them from the L3.
- ``auto``: per task, ``weights`` when its weights outgrow the L2 (where the model's streaming
  from memory is what its time is made of), else ``warm`` (a small layer's weights are fetched
  once and hidden by its compute; back-to-back timing is the cheaper and steadier measurement).

Pure: buffer sizes and the fingerprint's cache sizes in, a context out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from foundation.errors import BadInput


class TimingContext(str, Enum):
    WARM = "warm"
    FLUSHED = "flushed"
    WEIGHTS = "weights"
    PRODUCER = "producer"
    L2_EVICTED = "l2-evicted"
    AUTO = "auto"

    @property
    def flushes(self) -> bool:
        """Timed one call a repeat, each after a flush or an eviction (not back to back)."""
        return self in (TimingContext.FLUSHED, TimingContext.WEIGHTS, TimingContext.PRODUCER,
                        TimingContext.L2_EVICTED)

    @property
    def sized_by_l2(self) -> bool:
        """Needs the L2's size: to choose per task (auto), or to size the eviction."""
        return self in (TimingContext.AUTO, TimingContext.L2_EVICTED)


# A/B tunes on CPU kinds disagree on `auto` (slower on a Zen 4, faster on a Zen 5: docs/benchmarks.md), so
# the default stays TVM's, and a CPU kind's pack carries the context its own A/B chose (HardwareTiming).
DEFAULT_TIMING_CONTEXT = TimingContext.WARM
CONTEXTS = tuple(c.value for c in TimingContext)
# What a record can say it was timed in: auto is a choice per task, each task timed in one of these.
RECORD_CONTEXTS = tuple(c.value for c in TimingContext if c is not TimingContext.AUTO)
# The buffer streamed to evict the L2 is this many times its size (an L2 of 16 or more ways keeps
# little of what it held after one such pass), and this large where the L2's size is unknown.
EVICTION_L2_MULTIPLE = 2
EVICTION_BYTES_UNKNOWN_L2 = 8 * 2**20

# A context replaces warm on a CPU kind only when whole tunes timed in it built faster libraries by this
# much (the median of context/warm over the pairs) and in most pairs: one pair moves ±30% on these VMs.
CHOICE_MEDIAN_AT_MOST = 0.95
CHOICE_MIN_PAIRS = 3


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
    eviction_bytes: int = 0  # l2-evicted: the buffer streamed before each call

    def to_json(self) -> dict:
        shown = {"context": self.context.value, "weights": list(self.roles.weights),
                 "weight_bytes": self.roles.weight_bytes, "why": self.why}
        return shown | ({"eviction_bytes": self.eviction_bytes} if self.eviction_bytes else {})


def eviction_bytes(l2_kib: int | None) -> int:
    """The bytes streamed to evict an L2 of ``l2_kib`` (None: unknown)."""
    if l2_kib is None or l2_kib <= 0:
        return EVICTION_BYTES_UNKNOWN_L2
    return EVICTION_L2_MULTIPLE * l2_kib * 1024


def task_timing(requested: TimingContext, roles: BufferRoles, l2_kib: int | None) -> TaskTiming:
    """The context a task is timed in: ``requested``, or for ``auto`` the one its weights' size
    against the L2 (``l2_kib``; None: unknown, timed warm) says; ``l2-evicted`` streams twice the L2."""
    if requested is not TimingContext.AUTO:
        evicts = eviction_bytes(l2_kib) if requested is TimingContext.L2_EVICTED else 0
        return TaskTiming(requested, roles, "asked for", evicts)
    size = roles.weight_bytes
    if l2_kib is None or l2_kib <= 0:
        return TaskTiming(TimingContext.WARM, roles, "the L2's size is unknown")
    if size > l2_kib * 1024:
        return TaskTiming(TimingContext.WEIGHTS, roles,
                          f"its weights ({size / 1024:.0f} KiB) exceed the L2 ({l2_kib} KiB)")
    return TaskTiming(TimingContext.WARM, roles, f"its weights ({size / 1024:.0f} KiB) fit in the L2 ({l2_kib} KiB)")


@dataclass(frozen=True)
class HardwareTiming:
    """The context one CPU kind times its candidates in when nothing else is asked, and the A/B that chose
    it: whole tunes in pairs, ``ratios`` the context's library time over warm's, pair by pair."""

    context: TimingContext  # the one chosen: the tried one, or warm
    tried: TimingContext
    ratios: tuple[float, ...]
    evidence: tuple[str, ...]  # the A/B's result files

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def wins(self) -> int:
        return sum(r < 1 for r in self.ratios)

    def describe(self) -> str:
        return (f"{self.context.value}: {self.tried.value}/warm {self.median:.3f} (median of {len(self.ratios)} "
                f"A/B tunes, {self.wins} won)")

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context.value, "tried": self.tried.value, "ratios": [round(r, 4) for r in self.ratios],
                "median": round(self.median, 4), "wins": self.wins, "evidence": list(self.evidence)}

    @classmethod
    def from_json(cls, data: Any) -> "HardwareTiming | None":
        """A pack header's entry; None for one this version cannot read (a newer context, a damaged entry)."""
        try:
            ratios = tuple(float(r) for r in data["ratios"])
            if not ratios or not all(r > 0 for r in ratios):
                return None
            return cls(TimingContext(data["context"]), TimingContext(data["tried"]), ratios,
                       tuple(str(e) for e in data.get("evidence", ())))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


def choose_among_trials(trials: Sequence[HardwareTiming]) -> HardwareTiming:
    """The context a CPU kind times in, from the A/Bs of each context tried on it: of those that chose
    their context, the one with the lowest median; where none did, warm, shown by the A/B that came
    closest. A later A/B of one context that lost to warm leaves another context's win standing."""
    if not trials:
        raise ValueError("no A/B to choose from")
    won = [t for t in trials if t.context is not TimingContext.WARM]
    return min(won or trials, key=lambda t: t.median)


def choose_hardware_timing(tried: TimingContext, ratios: Sequence[float], evidence: Sequence[str]) -> HardwareTiming:
    """The context a CPU kind's A/B chose: ``tried`` where its median and most pairs beat warm
    (CHOICE_MEDIAN_AT_MOST over at least CHOICE_MIN_PAIRS pairs), else warm."""
    if tried is TimingContext.WARM:
        raise BadInput("an A/B of warm against itself chooses nothing", "give the A/B of another context")
    if len(ratios) < CHOICE_MIN_PAIRS or any(not r > 0 for r in ratios):
        raise BadInput(f"{len(ratios)} A/B pair(s) with positive ratios are too few to choose a timing context",
                       f"run at least {CHOICE_MIN_PAIRS} pairs (bench/cache_flush.py --pairs {CHOICE_MIN_PAIRS})")
    median = statistics.median(ratios)
    better = median <= CHOICE_MEDIAN_AT_MOST and 2 * sum(r < 1 for r in ratios) > len(ratios)
    return HardwareTiming(tried if better else TimingContext.WARM, tried, tuple(ratios), tuple(evidence))
