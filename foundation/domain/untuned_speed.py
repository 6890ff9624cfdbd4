"""Whether a tuned library is slower than the untuned build of its model, and how long to time both to tell.

Tuning only ever measures kernels one at a time, beside candidate builds; a library built from the
best of them has been seen slower than TVM's untuned build (mlp-tiny: 25.3 us against 9.34 us).
The validation therefore times the two in alternating blocks (foundation.runtime.interleaved_timing,
as the `--until` judge does), so load that comes and goes lands on both, and a job whose tuned
library is clearly slower keeps the untuned build instead (foundation.job_driver.driver).

How many runs: each side is timed for at least MIN_SIDE_MS in all, in BLOCKS blocks, and never for
fewer than the runs asked for (`--runs`). A 10 us model is thus timed 4,000 times a side in blocks
of 800 (each call's Python overhead is a few us, which both sides pay alike); a 30 ms model 20 times;
an untuned build of seconds once a block. The medians over all runs are compared: the tuned library
is slower when its median is at least SLOWER_MARGIN times the untuned one's, a margin above the
few percent by which two timings of one library differ on a quiet box.

When the verdict cannot change, the timing stops early (`decided`): after two blocks (one in each
order), with each side timed for MIN_SIDE_MS, every run of one side at least DECISIVE times every
run of the other. That is the case that costs: an untuned bert takes 33 s a call on a 2-core box
against 0.2 s tuned, and five blocks of it were minutes of a job spent confirming a 150x gap. The
tuned side is then timed alone until it has the runs asked for (foundation.runtime.validation).
A microsecond model seldom stops early (its blocks are sized to MIN_SIDE_MS / BLOCKS, so a side
has its MIN_SIDE_MS before the last block only where its calls run slower than when they were
sized), and a library within DECISIVE of its untuned build never does. Warm-up likewise: an
untuned build whose call takes WARM_ENOUGH_MS is warm after one call, not three.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from foundation.units import milliseconds

BLOCKS = 5
MIN_SIDE_MS = 200.0
MAX_RUNS_PER_BLOCK = 5000  # 25,000 calls a side: 0.25 s at 10 us a call, Python's overhead included
SLOWER_MARGIN = 1.05
DECISIVE = 2.0
WARM_ENOUGH_MS = 1000.0


def runs_per_block(call_ms: float, min_runs: int, blocks: int = BLOCKS) -> int:
    """Runs per block for a side whose one call takes ``call_ms``: MIN_SIDE_MS in all, ``min_runs`` at least."""
    by_time = math.ceil(MIN_SIDE_MS / blocks / max(call_ms, 1e-6))
    return max(1, min(MAX_RUNS_PER_BLOCK, max(math.ceil(min_runs / blocks), by_time)))


def decided(tuned: Sequence[Sequence[float]], untuned: Sequence[Sequence[float]]) -> bool:
    """Whether blocks still to come could not change the verdict (see the module's docstring)."""
    if min(len(tuned), len(untuned)) < 2:
        return False
    mine, theirs = _runs(tuned), _runs(untuned)
    if sum(mine) < MIN_SIDE_MS or sum(theirs) < MIN_SIDE_MS:
        return False
    return min(theirs) >= DECISIVE * max(mine) or min(mine) >= DECISIVE * max(theirs)


@dataclass(frozen=True)
class SpeedCheck:
    """A tuned library's median against the untuned build's, timed interleaved."""

    tuned_median_ms: float
    untuned_median_ms: float
    runs: int  # the tuned library's timed runs
    untuned_runs: int
    blocks: int
    kept_untuned: bool = False  # the job stored the untuned build instead (it was faster)
    threads: int | None = None  # the tuned library's threads, as `farm.load` runs it (None: not known)

    @property
    def ratio(self) -> float:
        """Tuned over untuned: above 1 the tuned library is slower."""
        return self.tuned_median_ms / self.untuned_median_ms if self.untuned_median_ms > 0 else float("inf")

    @property
    def slower_than_untuned(self) -> bool:
        return self.ratio >= SLOWER_MARGIN

    def describe(self) -> str:
        verdict = (f"{self.ratio:.2f}x the untuned build's time: SLOWER" if self.slower_than_untuned
                   else f"{1 / self.ratio:.2f}x faster than the untuned build" if self.ratio > 0 else "")
        threads = f" on {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else ""
        return (f"tuned {milliseconds(self.tuned_median_ms)} median of {self.runs} runs{threads}, "
                f"untuned {milliseconds(self.untuned_median_ms)} of {self.untuned_runs}, "
                f"interleaved in {self.blocks} blocks: {verdict}"
                + ("; the untuned build was kept" if self.kept_untuned else ""))

    def to_json(self) -> dict:
        return {"tuned_median_ms": self.tuned_median_ms, "untuned_median_ms": self.untuned_median_ms,
                "ratio": round(self.ratio, 4), "slower_than_untuned": self.slower_than_untuned,
                "kept_untuned": self.kept_untuned, "runs": self.runs, "untuned_runs": self.untuned_runs,
                "blocks": self.blocks, "margin": SLOWER_MARGIN, "threads": self.threads}

    @staticmethod
    def from_json(value: dict) -> "SpeedCheck":
        return SpeedCheck(float(value["tuned_median_ms"]), float(value["untuned_median_ms"]), int(value["runs"]),
                          int(value["untuned_runs"]), int(value.get("blocks") or BLOCKS),
                          bool(value.get("kept_untuned", False)), value.get("threads"))


def speed_check(tuned: Sequence[Sequence[float]], untuned: Sequence[Sequence[float]]) -> SpeedCheck:
    """The check from both sides' runs in ms, block by block (interleaved)."""
    mine, theirs = _runs(tuned), _runs(untuned)
    if not mine or not theirs:
        raise ValueError("both libraries must be timed")
    return SpeedCheck(statistics.median(mine), statistics.median(theirs), len(mine), len(theirs), len(tuned))


def _runs(blocks: Sequence[Sequence[float]]) -> list[float]:
    return [x for block in blocks for x in block]
