"""farm/tuning_rounds.py: what the embedded farm says of each round of `--until`."""

from __future__ import annotations

from farm.tuning_rounds import round_line
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.tuning_rounds import RoundResult, compare, parse_goal


def test_a_round_line_says_latencies_in_the_unit_that_fits():
    """A microsecond model against onnxruntime: 38 us, not 0.038 ms."""
    outcome = RoundsOutcome(parse_goal("onnxruntime"), 0.045)
    outcome.rounds.append(RoundResult(8, compare([[0.038] * 4] * 5, [[0.045] * 4] * 5), 0.0412))
    assert round_line(1, outcome) == ("round 1: the model runs in 38 us here (median; upper quartile 38 us; "
                                      "onnxruntime 45 us median, faster in 5 of 5 blocks: beaten), "
                                      "estimated from records 41.2 us")
    slow = RoundsOutcome(parse_goal("2s"), 2000.0)
    slow.rounds.append(RoundResult(8, compare([[2500.0] * 4] * 5, goal_ms=2000.0), None))
    assert round_line(2, slow) == ("round 2: the model runs in 2.5 s here (median; upper quartile 2.5 s; "
                                   "goal 2000 ms: not beaten)")
