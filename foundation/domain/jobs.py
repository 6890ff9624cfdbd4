"""Job states and the one table of legal transitions between them (pure, no I/O)."""

from __future__ import annotations

import enum

from foundation.domain.transitions import IllegalTransition, TransitionTable

__all__ = ["TRANSITIONS", "IllegalTransition", "JobState", "check_transition"]


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
