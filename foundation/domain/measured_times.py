"""Whether a record's measured times could be true: none below what one kernel call costs, none
faster than any device computes its FLOPs, and no more of them than a measurement takes.

A record's mean time ranks it among its workload's records, and the fastest is what every later
build applies: one time too low wins every build of that workload, on every job, for good.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The least one timed call of a kernel can take. TVM's time_evaluator timed a 4-element add, the
# smallest kernel a model yields, at 10.8 ns a call on a 2-core EPYC (2026-11); a call through
# TVM's packed-function ABI (arguments unpacked, an indirect call, a return) is tens of
# instructions, which no CPU retires in 2 ns. A GPU kernel's launch alone costs microseconds.
MIN_CALL_SECS = 2e-9
# A peak no device reaches: about 50 times the dense FP8 rate of the fastest accelerator sold.
PEAK_FLOP_PER_SEC = 1e17
# MetaSchedule times a candidate `repeat` times (the farm: a few); a thousand is no measurement's.
MAX_TIMES = 1_000


def time_floor(flop: float) -> float:
    """The least time a call of a kernel of ``flop`` floating-point operations can take."""
    return max(MIN_CALL_SECS, flop / PEAK_FLOP_PER_SEC if math.isfinite(flop) and flop > 0 else 0.0)


def implausible_times(run_secs: Sequence[float] | None, flop: float) -> str | None:
    """Why ``run_secs`` (a record's times, None: not measured) cannot be a kernel's of ``flop``, or None.

    MetaSchedule files a failed run at 1e10 s: large times are failures, kept as data.
    """
    if run_secs is None:
        return None
    if not run_secs:
        return "its run_secs are empty"
    if len(run_secs) > MAX_TIMES:
        return f"it has {len(run_secs):,} run_secs, more than the {MAX_TIMES:,} a measurement takes"
    floor = time_floor(flop)
    for seconds in run_secs:
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not math.isfinite(seconds):
            return f"its run_secs hold {seconds!r}, not a finite number"
        if seconds < floor:
            return (f"its run_secs hold {seconds:g} s, below the {floor:g} s a call of this kernel "
                    f"({flop:g} FLOPs) takes at least")
    return None
