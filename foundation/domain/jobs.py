"""Job states and the one table of legal transitions between them (pure, no I/O)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from foundation.domain.transitions import TransitionTable
from foundation.errors import BadInput, quoted

__all__ = ["FINAL_STATES", "TRANSITIONS", "JobState", "check_transition", "job_states"]


class JobState(enum.StrEnum):
    """A job's state; its value is the name stored and sent (a JobState is that string, in JSON and f-strings)."""

    QUEUED = "queued"
    RUNNING = "running"  # tasks are being tuned
    BUILDING = "building"  # the model is compiled with the best records
    VALIDATING = "validating"  # the library is checked against an untuned build and timed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return TRANSITIONS.is_final(self)


TRANSITIONS: TransitionTable[JobState] = TransitionTable("job", JobState, {
    # queued -> succeeded is a registry hit: answered without tuning.
    JobState.QUEUED: {JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED},
    JobState.RUNNING: {JobState.BUILDING, JobState.FAILED, JobState.CANCELLED},
    JobState.BUILDING: {JobState.VALIDATING, JobState.FAILED, JobState.CANCELLED},
    JobState.VALIDATING: {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED},
    JobState.SUCCEEDED: set(),
    JobState.FAILED: set(),
    JobState.CANCELLED: set(),
})

# Return ``new`` as a JobState if ``current -> new`` is legal, else raise IllegalTransition.
check_transition = TRANSITIONS.check

# The states a job ends in: those the table moves nowhere from. Their names, for a query or a wire
# state read as text (a JobState equals its name, and hashes as it).
FINAL_STATES: tuple[str, ...] = tuple(state.value for state in JobState if state.is_final)


def job_states(given: Iterable[str], option: str = "--state") -> list[JobState]:
    """The states a user named (`farm jobs --state failed`), in any case; an unknown one is bad
    input that names the states there are."""
    states = []
    for text in given:
        try:
            states.append(JobState(text.strip().lower()))
        except ValueError:
            raise BadInput(f"{option} {quoted(text)} is no job state",
                           f"give one of {', '.join(s.value for s in JobState)}") from None
    return states
