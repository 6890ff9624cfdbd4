"""A tuned library against the untuned build: how long each is timed, and when the tuned one is slower."""

from __future__ import annotations

import pytest

from foundation.domain.untuned_speed import (
    BLOCKS,
    DECISIVE,
    MAX_RUNS_PER_BLOCK,
    MIN_SIDE_MS,
    SLOWER_MARGIN,
    SpeedCheck,
    decided,
    runs_per_block,
    speed_check,
)


def test_each_side_is_timed_long_enough_and_never_less_than_asked():
    # A 10 us model: 200 ms a side, in BLOCKS blocks.
    assert runs_per_block(0.010, 20) * BLOCKS * 0.010 >= MIN_SIDE_MS
    assert runs_per_block(0.010, 20) == 4000
    # A 30 ms model: the runs asked for already take longer.
    assert runs_per_block(30.0, 20) == 4
    # An untuned build of seconds: once a block.
    assert runs_per_block(2000.0, 3) == 1
    # A call too fast to measure is capped.
    assert runs_per_block(0.0, 20) == MAX_RUNS_PER_BLOCK


def test_the_medians_over_every_block_decide():
    slower = speed_check([[25.0, 26.0], [24.0, 25.0]], [[9.0, 9.5], [9.3, 9.4]])
    assert slower.slower_than_untuned and slower.ratio == pytest.approx(25.0 / 9.35)
    assert (slower.runs, slower.untuned_runs, slower.blocks) == (4, 4, 2)
    assert slower.to_json()["slower_than_untuned"] is True and "SLOWER" in slower.describe()
    assert SpeedCheck.from_json(slower.to_json()) == slower
    # Within the margin: as fast, not slower.
    alike = speed_check([[1.0 * SLOWER_MARGIN - 0.01]], [[1.0]])
    assert not alike.slower_than_untuned
    faster = speed_check([[1.0]], [[10.0]])
    assert not faster.slower_than_untuned and "10.00x faster" in faster.describe()
    with pytest.raises(ValueError):
        speed_check([], [[1.0]])


def test_the_description_says_latencies_in_the_unit_that_fits():
    """`farm status`'s "Against untuned" line: microseconds as us, not 0.005932 ms."""
    check = speed_check([[0.005932] * 3], [[0.005951] * 3])
    assert check.describe().startswith("tuned 5.93 us median of 3 runs, untuned 5.95 us of 3, ")
    assert speed_check([[1523.0]], [[2100.0]]).describe().startswith("tuned 1.52 s median of 1 runs, untuned 2.1 s")


def test_the_timing_stops_early_only_when_the_rest_cannot_change_the_verdict():
    # An untuned bert (33 s a call) against its tuned build (0.2 s): two blocks decide.
    tuned, untuned = [[200.0] * 4, [210.0] * 4], [[33_000.0], [32_500.0]]
    assert not decided(tuned[:1], untuned[:1])  # one block: not yet both orders
    assert decided(tuned, untuned)
    # The other way round (a tuned library far slower) decides as well.
    assert decided(untuned, tuned)
    # A gap under DECISIVE: every block is timed.
    assert not decided([[100.0] * 4] * 2, [[DECISIVE * 100.0 - 1.0]] * 2)
    # One slow run of the tuned side within DECISIVE of the untuned's fastest: not decided.
    assert not decided([[200.0] * 3 + [20_000.0], [200.0] * 4], untuned)
    # A microsecond model 100x apart has neither side's MIN_SIDE_MS after two blocks of its runs.
    per_block = runs_per_block(0.010, 20)
    assert not decided([[0.010] * per_block] * 2, [[1.0] * runs_per_block(1.0, 3)] * 2)
    assert 2 * per_block * 0.010 < MIN_SIDE_MS
