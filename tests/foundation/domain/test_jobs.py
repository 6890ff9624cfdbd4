"""Job state transitions (pure)."""

import json

import pytest

from foundation.domain.jobs import FINAL_STATES, TRANSITIONS, JobState, check_transition
from foundation.domain.transitions import IllegalTransition


def test_the_happy_path_is_legal():
    path = [JobState.QUEUED, JobState.RUNNING, JobState.BUILDING, JobState.VALIDATING, JobState.SUCCEEDED]
    for current, new in zip(path, path[1:]):
        assert check_transition(current, new) is new


def test_a_hit_goes_straight_to_succeeded():
    assert check_transition("queued", "succeeded") is JobState.SUCCEEDED


@pytest.mark.parametrize("final", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_final_states_are_final(final):
    assert final.is_final
    for state in JobState:
        with pytest.raises(IllegalTransition):
            check_transition(final, state)


def test_stages_cannot_be_skipped_or_reversed():
    with pytest.raises(IllegalTransition, match="running to validating"):
        check_transition(JobState.RUNNING, JobState.VALIDATING)
    with pytest.raises(IllegalTransition):
        check_transition(JobState.BUILDING, JobState.RUNNING)
    with pytest.raises(ValueError):
        check_transition("queued", "exploded")


def test_the_final_states_are_those_the_table_moves_nowhere_from():
    assert FINAL_STATES == ("succeeded", "failed", "cancelled")
    assert all(TRANSITIONS.is_final(JobState(name)) for name in FINAL_STATES)
    # Read as text (a wire state's name, a row's column) and as the enum alike.
    assert "failed" in FINAL_STATES and JobState.CANCELLED in FINAL_STATES and "running" not in FINAL_STATES


def test_a_state_is_its_stored_name_wherever_it_is_written():
    """Rows, JSON documents, the wire and messages all carry the name: a JobState is that string."""
    state = JobState("succeeded")
    assert state is JobState.SUCCEEDED and state == "succeeded"
    assert f"job {state}" == "job succeeded" and str(state) == "succeeded"
    assert json.dumps({"state": state}) == '{"state": "succeeded"}'
    assert "succeeded" in {state} and state in FINAL_STATES
