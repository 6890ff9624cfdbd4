"""When tuning in rounds stops: the goal reached, no improvement for `patience` rounds, or the budget spent."""

from __future__ import annotations

import pytest

from foundation.domain.tuning_rounds import (
    ONNXRUNTIME,
    Goal,
    RoundResult,
    Stop,
    parse_goal,
    round_budgets,
    verdict,
)


def test_goals_parse_from_what_people_type():
    assert parse_goal("onnxruntime") == Goal(ONNXRUNTIME) == parse_goal(" ONNXRuntime ")
    assert parse_goal("20ms").latency_ms == 20.0
    assert parse_goal("0.5 s").latency_ms == 500.0
    assert parse_goal("800us").latency_ms == pytest.approx(0.8)
    assert parse_goal(".25ms").latency_ms == 0.25
    assert parse_goal("20ms").describe() == "20 ms" and Goal(ONNXRUNTIME).describe() == "onnxruntime"
    for bad in ("fast", "20", "ms", "-3ms", "20 minutes", "1e3ms", ""):
        with pytest.raises(ValueError, match="neither onnxruntime nor a latency"):
            parse_goal(bad)
    with pytest.raises(ValueError, match="above zero"):
        parse_goal("0ms")


def test_the_budget_is_cut_in_rounds_that_add_up_to_it():
    assert round_budgets(16) == [4, 4, 4, 4]
    assert round_budgets(10) == [3, 3, 3, 1]
    assert round_budgets(10, round_trials=4) == [4, 4, 2]
    assert round_budgets(3, round_trials=8) == [3]
    for total in range(1, 60):
        assert sum(round_budgets(total)) == total
    with pytest.raises(ValueError):
        round_budgets(0)
    with pytest.raises(ValueError):
        round_budgets(8, round_trials=0)


def rounds(*figures):
    return [RoundResult(8, latency, estimate) for latency, estimate in figures]


def test_reaching_the_goal_stops_at_once():
    assert verdict(rounds((30.0, 31.0)), goal_ms=40.0, patience=2, trials_left=100) is Stop.REACHED
    # At the goal is enough.
    assert verdict(rounds((40.0, 41.0)), goal_ms=40.0, patience=2, trials_left=0) is Stop.REACHED
    assert verdict([], goal_ms=40.0, patience=2, trials_left=100) is None


def test_the_budget_ends_the_rounds():
    assert verdict(rounds((50.0, 50.0)), goal_ms=40.0, patience=2, trials_left=0) is Stop.BUDGET
    assert verdict(rounds((50.0, 50.0)), goal_ms=40.0, patience=2, trials_left=1) is None


def test_patience_counts_rounds_whose_estimate_did_not_improve_by_one_percent():
    improving = rounds((60.0, 60.0), (55.0, 55.0), (50.0, 50.0))
    assert verdict(improving, goal_ms=40.0, patience=2, trials_left=100) is None
    stalled = rounds((60.0, 60.0), (55.0, 59.9), (50.0, 59.8))  # under 1% each: the timed latency does not count
    assert verdict(stalled, goal_ms=40.0, patience=2, trials_left=100) is Stop.PATIENCE
    assert verdict(stalled[:2], goal_ms=40.0, patience=2, trials_left=100) is None  # not yet 2 rounds after the first
    assert verdict(stalled, goal_ms=40.0, patience=3, trials_left=100) is None
    # Before every task has a measurement the estimate is not defined: such a round counts as improving.
    undefined = rounds((60.0, None), (55.0, 59.0), (50.0, 58.9))
    assert verdict(undefined, goal_ms=40.0, patience=2, trials_left=100) is None
    assert verdict(stalled, goal_ms=40.0, patience=0, trials_left=100) is None  # no patience: budget or goal only
