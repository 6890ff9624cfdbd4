"""How a job tuned in rounds went survives the job's options: a coordinator carries on from them after a restart;
what a row holds is read strictly, older rows with the documented defaults."""

import pytest

from foundation.domain.rounds_outcome import ReferenceCheck, ReferenceLatency, RoundsOutcome
from foundation.domain.tuning_rounds import RoundResult, Stop, UntilRequest, compare, parse_goal


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


def _against_onnxruntime() -> RoundsOutcome:
    outcome = RoundsOutcome(parse_goal("onnxruntime"), 0.045, ReferenceLatency(0.046, 0.045, 0.001, 20, 2),
                            ReferenceCheck(True, 2e-6, 1e-3, 1e-3))
    outcome.planned.append([8])
    outcome.rounds.append(RoundResult(8, compare([[0.038] * 4] * 5, [[0.045] * 4] * 5), None))
    outcome.stopped = Stop.REACHED
    return outcome


def test_the_stored_form_is_what_rows_hold_and_reads_back_whole():
    outcome = _against_onnxruntime()
    stored = outcome.to_json()
    assert stored["reference_latency_ms"] == {"mean": 0.046, "median": 0.045, "std": 0.001, "runs": 20, "warmup": 2}
    assert stored["reference_check"] == {"passed": True, "max_abs_err": 2e-6, "rtol": 1e-3, "atol_scale": 1e-3}
    assert stored["stopped"] == "reached" and stored["rounds"][0]["timing"]["blocks_won"] == 5
    assert RoundsOutcome.from_json(stored) == outcome


# A row of the first `--until` (before rounds were timed in blocks and onnxruntime checked): no top-level plan,
# no reference check, each round only its latency.
_FIRST_UNTIL = {"goal": "2 ms", "goal_ms": 2.0, "reference_latency_ms": None, "stopped": "reached", "latency_ms": 1.5,
                "summary": "reached 2 ms", "rounds": [{"trials": 4, "latency_ms": 2.5, "estimated_ms": None,
                                                      "planned": [2, 2]},
                                                     {"trials": 4, "latency_ms": 1.5, "estimated_ms": 1.4,
                                                      "planned": [4, 0]}]}


def test_a_row_of_the_first_until_reads_with_the_documented_defaults():
    read = RoundsOutcome.from_json(_FIRST_UNTIL)
    assert read.planned == [[2, 2], [4, 0]] and read.reference_check is None and read.stopped is Stop.REACHED
    assert [(r.latency_ms, r.timing.candidate_upper_ms, r.timing.blocks, r.timing.beats) for r in read.rounds] == \
        [(2.5, 2.5, 0, False), (1.5, 1.5, 0, True)]
    assert read.summary().startswith("reached: the tuned model ran in 1.5 ms here (upper quartile 1.5 ms)")


@pytest.mark.parametrize(("change", "named"), [
    (lambda s: s | {"rounds_left": 2}, "until holds rounds_left"),
    (lambda s: {k: v for k, v in s.items() if k != "goal_ms"}, "goal_ms"),
    (lambda s: s | {"stopped": "bored"}, "until.stopped 'bored'"),
    (lambda s: s | {"rounds": [s["rounds"][0] | {"timing": {**s["rounds"][0]["timing"], "beats": "yes"}}]},
     "timing.beats 'yes'"),
    (lambda s: s | {"reference_check": {**s["reference_check"], "checked_by": "me"}}, "reference_check holds"),
    (lambda s: s | {"reference_latency_ms": {"mean": 1.0}}, "median"),
    (lambda s: s | {"planned": [["eight"]]}, "eight"),
])
def test_a_stored_outcome_it_cannot_read_is_refused_naming_the_field(change, named):
    with pytest.raises((ValueError, KeyError), match=named):
        RoundsOutcome.from_json(change(_against_onnxruntime().to_json()))
