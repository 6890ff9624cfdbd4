"""When a library's timing reads as taken through other work, and which timing is kept."""

from __future__ import annotations

from foundation.domain.disturbed_timing import DISTURBED_SPREAD, MIN_RUNS, disturbed, quieter, spread


def test_a_quiet_timing_is_not_disturbed():
    # resnet-18 on a quiet Zen 4: 20-23 ms, interquartile range about 6% of the median.
    quiet = [21.3, 20.8, 21.9, 22.4, 21.0, 21.6, 20.9, 22.1, 21.4, 21.2, 23.0, 21.8]
    assert spread([quiet]) < DISTURBED_SPREAD
    assert not disturbed([quiet[:6], quiet[6:]])


def test_a_burst_over_part_of_the_runs_is_disturbed():
    # The Zen 4 pack's case: a library of about 22 ms timed while other work ran for part of it.
    burst = [22.0, 21.5, 49.0, 71.2, 23.0, 55.3, 21.9, 88.4, 48.7, 22.3, 60.1, 47.5]
    assert disturbed([burst[:4], burst[4:8], burst[8:]])


def test_too_few_runs_say_nothing():
    assert not disturbed([[1.0, 50.0, 2.0, 90.0, 1.0, 70.0, 3.0, 95.0][:MIN_RUNS - 1]])
    assert spread([[5.0] * (MIN_RUNS - 1)]) == 0.0


def test_the_lower_median_is_kept():
    assert quieter([[21.0, 22.0], [23.0]], [[48.0, 21.0], [50.0]])
    assert not quieter([[48.0, 21.0, 50.0]], [[21.0, 22.0, 23.0]])
    assert not quieter([[21.0, 22.0]], [[21.0], [22.0]])  # a tie keeps the first
    assert not quieter([], [[21.0]])
