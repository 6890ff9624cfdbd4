"""One job's way through its states, the same for the embedded mode and the coordinator.

A `JobDriver` moves one job only from the state it last saw the job in (a guarded write:
when another process moved the job first, by `farm cancel` or by failing a dead runner, the
move does not happen and the caller's step is moot), and only along the one transition
table (foundation.domain.jobs). How a move is written is the caller's: the embedded mode
updates the registry's job row (`RegistryJobMoves`); the coordinator also records the
move as a job event in its cluster store, in the same transaction.

The verdicts that decide where a job goes after tuning and after validation are here too,
so that both modes fail jobs for the same reasons, in the same words.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from foundation.clock import utc_now
from foundation.domain.jobs import JobState, check_transition
from foundation.domain.measurements import TaskOutcome, measurements_failed
from foundation.domain.weights_layout import WeightsLayout
from foundation.errors import RegistryError
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.untuned_speed import SpeedCheck
    from foundation.meta_schedule.progress import TaskProgress
    from foundation.registry.store import RegistryStore
    from foundation.runtime.library_runner import Latency
    from foundation.runtime.validation import ValidationResult


class JobMoves(Protocol):
    """Writes one guarded move of a job; False when the job was no longer in ``current``.

    A move into RUNNING records the start time, one into a final state the finish time (the
    coordinator's `ClusterStore.jobs.move_job` does both, with the job's state_changed event).
    """

    def move(self, job_id: str, current: JobState, new: JobState, *, status: str,
             error: str | None, **fields: Any) -> bool: ...


class RegistryJobMoves:
    """Moves written to the registry's job row alone (the embedded mode)."""

    def __init__(self, store: "RegistryStore", clock: Callable[[], dt.datetime] | None = None):
        self.store = store
        self._clock = clock or utc_now

    def move(self, job_id: str, current: JobState, new: JobState, *, status: str,
             error: str | None, **fields: Any) -> bool:
        if error is not None:
            fields["error"] = error[:4000]
        if new is JobState.RUNNING:
            fields.setdefault("started_at", self._clock())
        if new.is_final:
            fields.setdefault("finished_at", self._clock())
        try:
            self.store.update_job(job_id, expect_state=current.value, state=new.value, status=status, **fields)
        except RegistryError:
            return False
        return True


class JobDriver:
    """Moves one job along the transition table, each move guarded by the state it left."""

    def __init__(self, moves: JobMoves, job_id: str, state: JobState | str):
        self.moves = moves
        self.job_id = job_id
        self.state = JobState(state)

    def advance(self, new: JobState, status: str, *, error: str | None = None, **fields: Any) -> bool:
        """Move to ``new``; False (and no change) if another process moved the job first.

        Raises IllegalTransition for a move the table forbids.
        """
        check_transition(self.state, new)
        if not self.moves.move(self.job_id, self.state, new, status=status, error=error, **fields):
            return False
        self.state = new
        return True

    def fail(self, reason: str, status: str = "failed", **fields: Any) -> bool:
        return self.advance(JobState.FAILED, status, error=reason, **fields)

    def cancel(self, reason: str, **fields: Any) -> bool:
        return self.advance(JobState.CANCELLED, f"cancelled: {reason}", error=reason, **fields)


# -- verdicts -------------------------------------------------------------------------------


def validation_failure(check: "ValidationResult") -> str | None:
    """Why a validated library must not be committed, or None when it may be."""
    if check.passed:
        return None
    return f"tuned library disagrees with the untuned build: {check.reason}"


@dataclass(frozen=True)
class KeptLibrary:
    """What a validated job stores: its tuned library, or the untuned build when that ran faster."""

    latency: "Latency"
    weights_layout: WeightsLayout
    speed: "SpeedCheck | None"
    status: str  # the job's status line when it succeeded

    @property
    def untuned(self) -> bool:
        """The untuned build is kept, not the tuned library."""
        return self.speed is not None and self.speed.kept_untuned


def library_to_keep(latency: "Latency", weights_layout: WeightsLayout, untuned_latency: "Latency | None",
                    speed: "SpeedCheck | None", *, fallback: bool = True) -> KeptLibrary:
    """The tuned library, unless the validation timed it slower than the untuned build
    (foundation.domain.untuned_speed): then the untuned build (plain weights), which is what the
    job stores and answers with, its check saying so loudly. Without ``fallback`` (foundation.config's
    KEEP_SLOWER_ENV) the tuned library is stored all the same, its status saying it is slower.
    Decided from the timings alone: the chosen library's bytes are read once the choice is made."""
    if speed is None or not speed.slower_than_untuned or untuned_latency is None:
        return KeptLibrary(latency, weights_layout, speed, f"succeeded: {milliseconds(latency.mean_ms)} mean")
    if not fallback:
        return KeptLibrary(latency, weights_layout, speed,
                           f"succeeded, SLOWER THAN THE UNTUNED BUILD ({speed.ratio:.2f}x its time, stored as "
                           f"FARM_KEEP_SLOWER_TUNED asks): {milliseconds(latency.mean_ms)} mean")
    kept = replace(speed, kept_untuned=True)
    return KeptLibrary(untuned_latency, WeightsLayout.PLAIN, kept,
                       f"succeeded, KEPT THE UNTUNED BUILD: the tuned library ran {speed.ratio:.2f}x its time "
                       f"({milliseconds(speed.tuned_median_ms)} against {milliseconds(speed.untuned_median_ms)} "
                       f"median); {milliseconds(untuned_latency.mean_ms)} mean")


def tuning_failure(tasks: Sequence["TaskProgress"]) -> str | None:
    """Why a job whose candidates nearly all failed must not succeed (foundation.domain.measurements)."""
    return measurements_failed([
        TaskOutcome(name=t.name, weight=t.weight, flop=t.flop, trials=t.trials,
                    errors=t.build_errors + t.run_errors, first_error=t.errors[0] if t.errors else None)
        for t in tasks
    ])
