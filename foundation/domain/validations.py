"""Validation leases: a job's built library leased to one agent at a time to check and time (pure, no I/O).

The same machine as a shard's lease (foundation.domain.leases, .shard_leases), over one validation per job:
``pending -> leased -> done``, or back to ``pending`` when an attempt fails or its agent goes
silent, and ``failed`` once ``max_attempts`` attempts failed; ``cancelled`` with its job. Each
lease carries an attempt id, and a report under an attempt that is no longer current changes
nothing. Whether a validation that is done passed is the job's to judge (foundation.job_driver.pipeline).

The rules a validation's lease shares with a shard's (attempts, staleness, expiry) are
foundation.domain.leases'; its states, its table and its words are its own, here. Every
function takes values and returns new values; time is passed in as epoch seconds. The registry
applies the decisions with an UPDATE guarded by the state and attempt they were made from
(coordinator.cluster_store.guarded_update), and stores the states by their values.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from foundation.domain.leases import DEFAULT_MAX_ATTEMPTS, AttemptFailure, LeaseRules
from foundation.domain.transitions import IllegalTransition, TransitionTable

__all__ = [
    "IllegalValidationTransition",
    "Validation",
    "ValidationState",
    "allowed_sources",
    "cancel",
    "check_transition",
    "claim",
    "expire",
    "fail_attempt",
    "finish",
    "stale_reason",
]


class ValidationState(str, enum.Enum):
    PENDING = "pending"  # built, waiting for an agent of the job's fingerprint (again, after a failed attempt)
    LEASED = "leased"  # an agent checks and times it under the current attempt id
    DONE = "done"  # an agent reported what it found
    FAILED = "failed"  # every allowed attempt failed to run
    CANCELLED = "cancelled"  # its job was cancelled

    @property
    def is_final(self) -> bool:
        return TRANSITIONS.is_final(self)


class IllegalValidationTransition(IllegalTransition):
    """A validation was asked to move to a state its current state cannot reach."""


TRANSITIONS: TransitionTable[ValidationState] = TransitionTable("validation", ValidationState, {
    ValidationState.PENDING: {ValidationState.LEASED, ValidationState.CANCELLED},
    # leased -> pending is a retry: the attempt failed or its agent went silent.
    ValidationState.LEASED: {
        ValidationState.PENDING, ValidationState.DONE, ValidationState.FAILED, ValidationState.CANCELLED},
    ValidationState.DONE: set(),
    ValidationState.FAILED: set(),
    ValidationState.CANCELLED: set(),
}, IllegalValidationTransition)

# ``new`` as a ValidationState if ``current -> new`` is legal, else IllegalValidationTransition.
check_transition = TRANSITIONS.check
# The states from which a validation may move to ``new``: the guard of a bulk SQL UPDATE.
allowed_sources = TRANSITIONS.allowed_sources


@dataclass(frozen=True)
class Validation:
    """A job's validation lease. ``attempt`` counts the leases granted so far and is the current
    lease's attempt id while leased; ``agent_id`` and ``leased_at`` describe the current lease
    (or, once failed for good, the last)."""

    job_id: str
    state: ValidationState = ValidationState.PENDING
    attempt: int = 0
    agent_id: str | None = None
    leased_at: float | None = None
    failures: tuple[AttemptFailure, ...] = ()

    def moved(self, new: ValidationState, **changes) -> "Validation":
        """This validation in state ``new`` with ``changes``, if the transition is legal."""
        return replace(self, state=check_transition(self.state, new), **changes)


def claim(validation: Validation, agent_id: str, now: float) -> Validation:
    """Lease a pending validation to ``agent_id`` under the next attempt id."""
    return VALIDATION_LEASES.grant(validation, agent_id, now)


def stale_reason(validation: Validation, attempt: int, agent_id: str | None = None) -> str | None:
    """Why a report about ``attempt`` must be dropped, or None if that lease is current."""
    about = f"attempt {attempt} of the validation of {validation.job_id}"
    if attempt != validation.attempt:
        return f"{about} is stale (latest {validation.attempt})"
    if validation.state is not ValidationState.LEASED:
        return f"{about} is over: it is {validation.state.value}"
    if agent_id is not None and agent_id != validation.agent_id:
        return f"{about} was granted to {validation.agent_id}"
    return None


def _silence_reason(validation: Validation, silent: float, ttl: float) -> str:
    return f"agent {validation.agent_id} sent no heartbeat for over {ttl:.0f}s (lease TTL)"


VALIDATION_LEASES: LeaseRules[Validation] = LeaseRules(
    pending=ValidationState.PENDING, leased=ValidationState.LEASED, done=ValidationState.DONE,
    failed=ValidationState.FAILED, stale_reason=stale_reason, silence_reason=_silence_reason)


def finish(validation: Validation, attempt: int, agent_id: str | None = None) -> Validation:
    """The validation done (the agent found an outcome), if ``attempt`` is its current lease;
    else raise StaleAttempt."""
    return VALIDATION_LEASES.finish(validation, attempt, agent_id)


def fail_attempt(
    validation: Validation,
    attempt: int,
    reason: str,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    agent_id: str | None = None,
) -> Validation:
    """End the current lease as failed: pending again, or failed once ``max_attempts`` attempts
    failed, every attempt's reason kept; raise StaleAttempt if ``attempt`` is not current."""
    return VALIDATION_LEASES.fail_attempt(validation, attempt, reason, max_attempts, agent_id)


def expire(
    validations: Iterable[Validation],
    agent_last_heartbeat: Mapping[str, float],
    now: float,
    ttl: float,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[Validation]:
    """Leased validations whose agent has been silent for longer than ``ttl``, each with that
    attempt failed (`fail_attempt`). Taking the lease counts as being alive; an agent absent
    from ``agent_last_heartbeat`` is silent since it took the lease."""
    return VALIDATION_LEASES.expire(validations, agent_last_heartbeat, now, ttl, max_attempts)


def cancel(validation: Validation) -> Validation:
    """The validation of a cancelled job; one that already ended stays as it is."""
    return validation if validation.state.is_final else validation.moved(ValidationState.CANCELLED)
