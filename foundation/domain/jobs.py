"""Job states and the one table of legal transitions between them (pure, no I/O)."""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"  # tasks are being tuned
    BUILDING = "building"  # the model is compiled with the best records
    VALIDATING = "validating"  # the library is checked against an untuned build and timed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # queued -> succeeded is a registry hit: answered without tuning.
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.BUILDING, JobState.FAILED, JobState.CANCELLED}),
    JobState.BUILDING: frozenset({JobState.VALIDATING, JobState.FAILED, JobState.CANCELLED}),
    JobState.VALIDATING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    """A job was asked to move to a state its current state cannot reach."""


def check_transition(current: JobState | str, new: JobState | str) -> JobState:
    """Return ``new`` as a JobState if ``current -> new`` is legal, else raise."""
    current, new = JobState(current), JobState(new)
    if new not in _TRANSITIONS[current]:
        raise IllegalTransition(f"job cannot go from {current.value} to {new.value}")
    return new
