"""How a job tuned in rounds went survives the job's options: a coordinator carries on from them after a restart."""

from foundation.domain.tuning_rounds import RoundResult, Stop, compare, parse_goal
from foundation.job_driver.tuning_rounds import RoundsOutcome, UntilRequest


def test_an_outcome_between_rounds_round_trips_with_the_round_being_tuned():
    outcome = RoundsOutcome(parse_goal("20ms"), 20.0)
    outcome.planned.append([1, 2])
    outcome.rounds.append(RoundResult(3, compare([[25.0] * 4] * 5, goal_ms=20.0), 24.0))
    outcome.planned.append([2, 2])  # round 2 is being tuned: planned, not judged
    back = RoundsOutcome.from_json(outcome.to_json())
    assert back.planned == [[1, 2], [2, 2]] and back.rounds == outcome.rounds
    assert back.stopped is None and not back.cancelled and back.goal == outcome.goal
    assert back.summary() == "tuning in rounds until 20 ms: after 1 round (3 trials) so far"
    outcome.stopped = Stop.PATIENCE
    ended = RoundsOutcome.from_json(outcome.to_json())
    assert ended.stopped is Stop.PATIENCE and ended.summary().startswith("not reached, no improvement:")
    outcome.stopped, outcome.cancelled = None, True
    assert RoundsOutcome.from_json(outcome.to_json()).summary().startswith("cancelled after 1 round")


def test_a_request_round_trips_with_its_exact_latency():
    request = UntilRequest(parse_goal("12.345678ms"), patience=3, round_trials=8)
    assert UntilRequest.from_json(request.to_json()) == request
    onnx = UntilRequest(parse_goal("onnxruntime"))
    assert UntilRequest.from_json(onnx.to_json()) == onnx


def test_the_summary_says_latencies_in_the_unit_that_fits():
    """A microsecond model's rounds, as `farm status` shows them: 38 us, not 0.038 ms."""
    outcome = RoundsOutcome(parse_goal("onnxruntime"), 0.045)
    outcome.rounds.append(RoundResult(8, compare([[0.038] * 4] * 5, [[0.045] * 4] * 5), 0.04))
    outcome.stopped = Stop.REACHED
    assert outcome.summary() == ("reached: the tuned model ran in 38 us here (upper quartile 38 us, faster in 5 of "
                                 "5 interleaved blocks), beating onnxruntime's 45 us, after 1 round (8 trials)")
