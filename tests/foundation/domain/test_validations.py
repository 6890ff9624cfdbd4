"""Validation leases (pure): attempt ids, stale reports, TTL expiry, failure after max attempts."""

import itertools

import pytest

from foundation.domain.leases import StaleAttempt
from foundation.domain.transitions import IllegalTransition
from foundation.domain.validations import (
    IllegalValidationTransition,
    Validation,
    ValidationState,
    allowed_sources,
    cancel,
    check_transition,
    claim,
    expire,
    fail_attempt,
    finish,
    stale_reason,
)

TTL = 30.0


def built(job_id="job-1"):
    return Validation(job_id)


# --- leases ------------------------------------------------------------------------------------


def test_each_claim_gets_the_next_attempt_id():
    first = claim(built(), "agent-a", now=100.0)
    assert (first.state, first.attempt, first.agent_id, first.leased_at) == (ValidationState.LEASED, 1, "agent-a",
                                                                             100.0)
    retry = fail_attempt(first, 1, "device busy")
    assert (retry.state, retry.agent_id, retry.leased_at) == (ValidationState.PENDING, None, None)
    second = claim(retry, "agent-b", now=200.0)
    assert (second.attempt, second.agent_id, second.leased_at) == (2, "agent-b", 200.0)
    assert [(f.attempt, f.agent_id, f.reason) for f in second.failures] == [(1, "agent-a", "device busy")]


def test_only_a_pending_validation_can_be_claimed():
    leased = claim(built(), "agent-a", 0.0)
    with pytest.raises(IllegalValidationTransition, match="leased to leased"):
        claim(leased, "agent-b", 1.0)
    done = finish(leased, 1, "agent-a")
    with pytest.raises(IllegalValidationTransition, match="done to leased"):
        claim(done, "agent-b", 1.0)


def test_a_report_under_a_stale_attempt_changes_nothing():
    first = claim(built(), "agent-a", 0.0)
    assert stale_reason(first, 1, "agent-a") is None
    (retry,) = expire([first], {"agent-a": 0.0}, now=31.0, ttl=TTL)
    current = claim(retry, "agent-b", 32.0)
    # agent-a comes back from a partition and reports under its old attempt.
    assert stale_reason(current, 1, "agent-a") == "attempt 1 of the validation of job-1 is stale (latest 2)"
    assert stale_reason(current, 3) == "attempt 3 of the validation of job-1 is stale (latest 2)"
    assert stale_reason(current, 2, "agent-a") == "attempt 2 of the validation of job-1 was granted to agent-b"
    with pytest.raises(StaleAttempt, match="stale"):
        finish(current, 1, "agent-a")
    with pytest.raises(StaleAttempt, match="stale"):
        fail_attempt(current, 1, "late failure from agent-a", agent_id="agent-a")
    done = finish(current, 2, "agent-b")
    assert done.state is ValidationState.DONE and done.attempt == 2 and done.agent_id == "agent-b"
    assert stale_reason(done, 2, "agent-b") == "attempt 2 of the validation of job-1 is over: it is done"
    with pytest.raises(StaleAttempt, match="is over"):
        finish(done, 2, "agent-b")


def test_after_max_attempts_a_validation_fails_with_every_reason():
    validation = built()
    reasons = []
    for attempt, agent in zip(itertools.count(1), ["agent-a", "agent-b", "agent-c"]):
        assert validation.state is ValidationState.PENDING
        validation = claim(validation, agent, now=100.0 * attempt)
        reason = f"the library would not load on {agent}"
        reasons.append(reason)
        validation = fail_attempt(validation, attempt, reason, max_attempts=3, agent_id=agent)
    assert validation.state is ValidationState.FAILED
    assert [f.reason for f in validation.failures] == reasons
    assert [f.attempt for f in validation.failures] == [1, 2, 3]
    # The last lease is kept on a validation that failed for good: who held it, and since when.
    assert (validation.agent_id, validation.leased_at) == ("agent-c", 300.0)
    with pytest.raises(IllegalValidationTransition):
        claim(validation, "agent-d", 400.0)


# --- heartbeat TTL -----------------------------------------------------------------------------


def test_a_missed_heartbeat_ttl_fails_only_that_agents_attempt():
    a = claim(built("job-a"), "agent-a", now=0.0)
    b = claim(built("job-b"), "agent-b", now=0.0)
    pending = built("job-c")
    beats = {"agent-a": 10.0, "agent-b": 35.0}
    assert expire([a, b, pending], beats, now=40.0, ttl=TTL) == []  # exactly TTL: not yet
    (retry,) = expire([a, b, pending], beats, now=40.5, ttl=TTL)
    assert retry.job_id == "job-a" and retry.state is ValidationState.PENDING and retry.agent_id is None
    (failure,) = retry.failures
    assert (failure.attempt, failure.agent_id) == (1, "agent-a")
    assert failure.reason == "agent agent-a sent no heartbeat for over 30s (lease TTL)"


def test_taking_a_lease_counts_as_being_alive():
    # The agent's last beat is old, but it leased just now; an agent unknown to the map is
    # silent since its lease.
    validation = claim(built(), "agent-a", now=100.0)
    assert expire([validation], {"agent-a": 0.0}, now=120.0, ttl=TTL) == []
    assert expire([validation], {}, now=120.0, ttl=TTL) == []
    assert len(expire([validation], {}, now=131.0, ttl=TTL)) == 1


def test_expiry_counts_towards_max_attempts():
    validation = claim(built(), "agent-a", 0.0)
    (validation,) = expire([validation], {}, now=100.0, ttl=TTL, max_attempts=2)
    validation = claim(validation, "agent-b", 101.0)
    (validation,) = expire([validation], {}, now=200.0, ttl=TTL, max_attempts=2)
    assert validation.state is ValidationState.FAILED and len(validation.failures) == 2


# --- cancelling --------------------------------------------------------------------------------


def test_cancelling_ends_a_waiting_or_leased_validation_and_keeps_one_that_ended():
    assert cancel(built()).state is ValidationState.CANCELLED
    leased = claim(built(), "agent-a", 0.0)
    assert cancel(leased).state is ValidationState.CANCELLED
    done = finish(leased, 1)
    assert cancel(done) is done
    failed = fail_attempt(leased, 1, "no device", max_attempts=1)
    assert cancel(failed) is failed


# --- the transition table ----------------------------------------------------------------------

LEGAL = {
    (ValidationState.PENDING, ValidationState.LEASED),
    (ValidationState.PENDING, ValidationState.CANCELLED),
    (ValidationState.LEASED, ValidationState.PENDING),
    (ValidationState.LEASED, ValidationState.DONE),
    (ValidationState.LEASED, ValidationState.FAILED),
    (ValidationState.LEASED, ValidationState.CANCELLED),
}


@pytest.mark.parametrize("current,new", list(itertools.product(ValidationState, ValidationState)))
def test_transition_table(current, new):
    if (current, new) in LEGAL:
        assert check_transition(current.value, new.value) is new
    else:
        with pytest.raises(IllegalValidationTransition, match=f"from {current.value} to {new.value}"):
            check_transition(current, new)


def test_illegal_transitions_raise_the_common_error_and_bad_names_raise():
    assert issubclass(IllegalValidationTransition, IllegalTransition)
    assert {s for s in ValidationState if s.is_final} == {
        ValidationState.DONE, ValidationState.FAILED, ValidationState.CANCELLED}
    with pytest.raises(ValueError):
        check_transition("pending", "exploded")
    with pytest.raises(IllegalValidationTransition):
        finish(claim(built(), "a", 0.0), 1).moved(ValidationState.PENDING)


def test_the_stored_values_are_the_registrys():
    # The registry stores states by value (no schema change when the rules moved here).
    assert [s.value for s in ValidationState] == ["pending", "leased", "done", "failed", "cancelled"]


def test_allowed_sources_is_the_guard_for_bulk_updates():
    assert allowed_sources(ValidationState.CANCELLED) == {ValidationState.PENDING, ValidationState.LEASED}
    assert allowed_sources("leased") == {ValidationState.PENDING}
    assert allowed_sources(ValidationState.DONE) == {ValidationState.LEASED}
    for new in ValidationState:
        for source in allowed_sources(new):
            check_transition(source, new)
