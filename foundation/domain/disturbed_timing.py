"""Whether a library's timing was taken while the box was busy, and which of two timings to keep.

A job stores its library's latency, shows it on every registry hit, and picks the fastest of
several libraries by it (foundation.job_driver.hits). One timing taken through a burst of other
work stays wrong for good: a resnet-18 that runs in 21-24 ms was stored at 49.2 ms median with a
27.8 ms standard deviation (a Zen 4 pack). On a quiet box two timings of one library differ by a
few percent and their runs spread little (resnet-18: interquartile range 4-6% of the median);
a burst that lands on part of the runs widens that spread long before it moves the median.

So a timing whose interquartile range exceeds ``DISTURBED_SPREAD`` of its median is taken again,
up to ``RETIMES`` times, and the timing with the lowest median is kept: load only ever lengthens
a run, so the lower median is the one nearer the library's own time.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import chain

# Timings come as blocks of runs (foundation.runtime.interleaved_timing); each rule reads all of them.
Blocks = Sequence[Sequence[float]]

DISTURBED_SPREAD = 0.2
RETIMES = 2
MIN_RUNS = 8  # fewer runs than this give no spread worth reading


def spread(blocks: Blocks) -> float:
    """The runs' interquartile range over their median (0 for fewer than MIN_RUNS runs)."""
    runs = list(chain.from_iterable(blocks))
    if len(runs) < MIN_RUNS:
        return 0.0
    q1, median, q3 = statistics.quantiles(runs, n=4)
    return (q3 - q1) / median if median > 0 else 0.0


def disturbed(blocks: Blocks) -> bool:
    """Whether the runs spread as a timing through other work does (see the module's docstring)."""
    return spread(blocks) > DISTURBED_SPREAD


def quieter(again: Blocks, kept: Blocks) -> bool:
    """Whether a second timing of one library, ``again``, is the one to keep: its median is lower."""
    new, old = list(chain.from_iterable(again)), list(chain.from_iterable(kept))
    return bool(new) and (not old or statistics.median(new) < statistics.median(old))
