"""When tuning in rounds stops: the goal reached, no improvement for `patience` rounds, or the budget spent."""

from __future__ import annotations

import pytest

from foundation.domain.tuning_rounds import (
    ONNXRUNTIME,
    Goal,
    RoundResult,
    Stop,
    compare,
    parse_goal,
    quantile,
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


def test_a_goal_spelled_for_the_wire_reads_back_as_itself():
    for text in ("onnxruntime", "20ms", "12.3456789ms", "0.001ms", "800us", "2.5s"):
        goal = parse_goal(text)
        assert parse_goal(goal.text()) == goal or parse_goal(goal.text()).latency_ms == pytest.approx(
            goal.latency_ms, abs=1e-6)
    assert parse_goal("12.3456789ms").text() == "12.345679ms"  # describe() says 12.3457 ms


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


def rounds(*figures, goal_ms=40.0):
    """Rounds whose model ran steadily at ``latency`` (every run), against a given latency."""
    return [RoundResult(8, compare([[latency] * 4] * 5, goal_ms=goal_ms), estimate) for latency, estimate in figures]


def test_reaching_the_goal_stops_at_once():
    assert verdict(rounds((30.0, 31.0)), patience=2, trials_left=100) is Stop.REACHED
    # At the goal is enough.
    assert verdict(rounds((40.0, 41.0)), patience=2, trials_left=0) is Stop.REACHED
    assert verdict([], patience=2, trials_left=100) is None


def test_the_budget_ends_the_rounds():
    assert verdict(rounds((50.0, 50.0)), patience=2, trials_left=0) is Stop.BUDGET
    assert verdict(rounds((50.0, 50.0)), patience=2, trials_left=1) is None


def test_patience_counts_rounds_whose_estimate_did_not_improve_by_one_percent():
    improving = rounds((60.0, 60.0), (55.0, 55.0), (50.0, 50.0))
    assert verdict(improving, patience=2, trials_left=100) is None
    stalled = rounds((60.0, 60.0), (55.0, 59.9), (50.0, 59.8))  # under 1% each: the timed latency does not count
    assert verdict(stalled, patience=2, trials_left=100) is Stop.PATIENCE
    assert verdict(stalled[:2], patience=2, trials_left=100) is None  # not yet 2 rounds after the first
    assert verdict(stalled, patience=3, trials_left=100) is None
    # Before every task has a measurement the estimate is not defined: such a round counts as improving.
    undefined = rounds((60.0, None), (55.0, 59.0), (50.0, 58.9))
    assert verdict(undefined, patience=2, trials_left=100) is None
    assert verdict(stalled, patience=0, trials_left=100) is None  # no patience: budget or goal only


def test_a_latency_goal_is_beaten_by_the_upper_quartile_not_one_fast_median():
    # Median 18 ms, but one run in four or more at 25 ms: not reliably under 20 ms.
    bursty = [[18.0, 18.0, 25.0, 25.0], [18.0, 18.0, 18.0, 25.0], [17.0, 18.0, 18.0, 25.0]]
    verdict_ = compare(bursty, goal_ms=20.0)
    assert verdict_.candidate_ms == 18.0 and verdict_.candidate_upper_ms == 25.0 and not verdict_.beats
    steady = [[18.0, 18.5, 19.0, 19.5]] * 3
    beaten = compare(steady, goal_ms=20.0)
    assert beaten.beats and beaten.blocks_won is None and beaten.goal_ms == 20.0 and beaten.blocks == 3
    assert beaten.candidate_upper_ms == pytest.approx(19.125)


def test_a_reference_is_beaten_only_by_the_upper_quartile_and_most_paired_blocks():
    reference = [[20.0, 20.5, 21.0, 21.5]] * 5
    clearly = compare([[17.0, 17.5, 18.0, 18.5]] * 5, reference)
    assert clearly.beats and clearly.blocks_won == 5 and clearly.goal_ms == pytest.approx(20.75)
    # The same medians, but the model's slow quarter reaches past the reference's median.
    overlapping = compare([[17.0, 17.5, 22.0, 23.0]] * 5, reference)
    assert overlapping.candidate_ms < overlapping.goal_ms and not overlapping.beats
    # A burst of load in the first three blocks inflated the reference's pooled median: pooled,
    # the model looks faster, yet block by block it lost three of five. No verdict on that.
    drifting_reference = [[30.0] * 4] * 3 + [[12.0] * 4] * 2
    drifting_model = [[10.0] * 4] * 2 + [[31.0] * 4] + [[13.0] * 4] * 2
    drift = compare(drifting_model, drifting_reference)
    assert drift.candidate_upper_ms <= drift.goal_ms and drift.blocks_won == 2 and not drift.beats
    # A tie is not a win.
    assert not compare([[20.0] * 4] * 5, [[20.0] * 4] * 5).beats


def test_comparisons_refuse_what_cannot_be_compared():
    with pytest.raises(ValueError, match="not timed"):
        compare([], goal_ms=1.0)
    with pytest.raises(ValueError, match="blocks"):
        compare([[1.0]] * 3, [[1.0]] * 2)
    with pytest.raises(ValueError, match="every block"):
        compare([[1.0]] * 2, [[1.0], []])
    with pytest.raises(ValueError, match="a reference's timings or a latency"):
        compare([[1.0]])


def test_quantiles_interpolate_as_numpy_does():
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.75) == 3.25
    assert quantile([7.0], 0.75) == 7.0
    assert quantile([1.0, 2.0], 1.0) == 2.0
