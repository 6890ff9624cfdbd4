"""A job's recipe, written once for both modes: the order of its steps, each step's state move, status
line, notes and verdict.

    queued ──plan──► running ──tuned──► building ──built──► validating ──validated──► succeeded
       (each step can end the job: failed, with its step's status line, or cancelled)

`JobPipeline.advance(work)` takes one job one step on from the state it is in, and only that: the
embedded farm calls it until the job ends (farm.embedded_site), the coordinator's tick calls it for
each job that has a step to take (coordinator.housekeeping). What differs between the modes is only
where tuning and validation run, in this process or on agents: a `JobSite` says so. A step whose job
was moved meanwhile by another process (`farm cancel`, a dead runner failed) changes nothing: every
move is guarded by the state the step found (foundation.job_driver.driver).

The step bodies are foundation.job_driver.steps'; the moves and verdicts foundation.job_driver.driver's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from foundation.domain.job_spec import JobNotes, JobSpec, job_options, noted
from foundation.domain.jobs import JobState
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.weights_layout import AUTO
from foundation.errors import FarmError, RegistryError
from foundation.job_driver import steps
from foundation.job_driver.built_untuned import built_untuned, describe_built_untuned
from foundation.job_driver.driver import JobDriver, JobMoves
from foundation.job_driver.rounds_loop import TuningInRounds
from foundation.job_driver.tuning_rounds import set_up_goal
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore
    from foundation.runtime.validation import LibraryCheck

# The status lines of the recipe's moves, each written here alone. Where tuning and validation run
# adds its own lines (a coordinator's shards done so far, the agent that validates).
BUILDING = "building: compiling with the best records, and an untuned reference"
VALIDATING = "validating: {where}"
CANDIDATES_FAILED = "failed: its candidates failed"
VALIDATION_FAILED = "failed: validation"
NOT_VALIDATED = "failed: the library could not be validated"
# A step that raised: its job fails with the step's line, the error kept as "<what> failed: <error>". A
# commit that raised fails nothing: the validated job is committed by its next advance.
STEP_FAILED = {
    JobState.QUEUED: ("failed: could not extract tuning tasks", "planning"),
    JobState.RUNNING: ("failed: the tuning failed", "tuning"),
    JobState.BUILDING: ("failed: the build failed", "build"),
}
ROUNDS_NOT_SET_UP = ("failed: could not set up its rounds", "planning")


@dataclass
class JobWork:
    """One job as this process works on it: the registry's row, and what this process made of it so far
    (the embedded farm keeps it from step to step; the coordinator reads a job afresh for each step)."""

    job: "Job"
    planned: "steps.Planned | None" = None
    tuned: "Tuned | None" = None
    artifact: "Artifact | None" = None
    _loaded: "LoadedModel | None" = field(default=None, repr=False)
    _target: "tvm.target.Target | None" = field(default=None, repr=False)

    @property
    def spec(self) -> JobSpec:
        return job_options(self.job).spec

    @property
    def notes(self) -> JobNotes:
        return job_options(self.job).notes

    @property
    def state(self) -> JobState:
        return self.job.state


@dataclass(frozen=True)
class TuningStart:
    """What the plan step decided: what to tune and how the job's row says so, for the site to start."""

    planned: "steps.Planned"
    status: str  # the running job's status line, where tuning here has one of its own
    trials_budget: int
    notes: dict[str, Any]  # JobNotes changes the move to running writes
    rounds: TuningInRounds | None = None  # tuned in rounds: the rounds and their goal as set up
    goal: RoundsOutcome | None = None


@dataclass(frozen=True)
class Tuned:
    """How the tuning ended, as its site tells it."""

    trials: int
    cancelled: str | None = None  # why it stopped before its end (a cancel asked of this process)
    rounds: RoundsOutcome | None = None  # tuned in rounds: how they went
    failure: str | None = None  # why its candidates do not count (foundation.job_driver.driver.tuning_failure)


@dataclass(frozen=True)
class Validated:
    """How the validation ended, as its site tells it."""

    check: "LibraryCheck | None"  # None: it could not run (``could_not_run`` says why)
    library_of: Callable[[bool], bytes]  # the tuned library's bytes, or with True the untuned build's
    could_not_run: str | None = None
    where: str = ""  # added to the status line: where it ran, when not here


class JobSite(Protocol):
    """Where a job's tuning and validation run, and what a step needs of its mode."""

    tvm_version: str
    ir_lock: AbstractContextManager  # held around TVM IR work: the process's TVM_IR_LOCK (reentrant)

    def model(self, job: "Job") -> "LoadedModel": ...
    def target(self, job: "Job") -> "tvm.target.Target": ...
    def database(self, job: "Job") -> Any: ...
    def software(self, job: "Job") -> dict: ...
    def onnx_file(self, job: "Job") -> bytes | None: ...
    def tell(self, job: "Job", stage: str, detail: str) -> None: ...
    def cancel_requested(self, job: "Job") -> str | None:
        """Why this process was asked to stop the job; None when it was not."""
    def start_tuning(self, work: JobWork, start: TuningStart, driver: JobDriver) -> None:
        """Move the job to running (``start``'s status and notes) and start its tuning."""
    def tuned(self, work: JobWork) -> Tuned | None:
        """How the job's tuning ended; None while it goes on."""
    def built_before(self, work: JobWork) -> tuple[bytes | None, bytes | None]:
        """The library and untuned build made while tuning (the last round's; onnxruntime's check's)."""
    def validation_pending(self, work: JobWork) -> bool:
        """Whether the job's validation was started before (a restart lost only the move)."""
    def start_validation(self, work: JobWork, built: "steps.Built") -> None:
        """Start validating ``built``."""
    def validating_where(self, work: JobWork) -> str:
        """Where the validation runs, for the status line."""
    def validated(self, work: JobWork) -> Validated | None:
        """How the validation ended; None while it goes on."""
    def succeeded(self, work: JobWork, committed: "steps.Committed") -> None: ...


class JobPipeline:
    """Advances jobs of one registry through the recipe, with ``moves`` writing each move."""

    def __init__(self, store: "RegistryStore", moves: JobMoves, site: JobSite):
        self.store = store
        self.moves = moves
        self.site = site
        self._committing = threading.Lock()  # a validated job is committed once, whoever advances it

    def work(self, job_id: str) -> JobWork:
        return JobWork(self.store.get_job(job_id))

    def advance(self, work: JobWork) -> None:
        """Take the job one step on from its state; nothing for a job ended, or whose step must wait.

        A step that raises fails the job with its step's status line (when the job is still where the
        step found it; a commit's excepted), and the error goes on to the caller."""
        state = work.state
        step = {JobState.QUEUED: self._plan, JobState.RUNNING: self._end_tuning, JobState.BUILDING: self._build,
                JobState.VALIDATING: self._validate}.get(state)
        if step is None:
            return
        try:
            step(work)
        except Exception as err:
            if state not in STEP_FAILED:
                raise
            status, what = ROUNDS_NOT_SET_UP if state is JobState.QUEUED and work.spec.until else STEP_FAILED[state]
            problem = f"{err.problem} ({err.fix})" if isinstance(err, FarmError) and err.fix else \
                f"{type(err).__name__}: {err}"
            self._driver(work, state).fail(f"{what} failed: {problem}"[:2000], status)
            raise
        finally:
            work.job = self.store.get_job(work.job.id)

    # -- the steps ----------------------------------------------------------------------------

    def _plan(self, work: JobWork) -> None:
        """queued -> running: the tasks and their budget, the form chosen, a goal set up for rounds."""
        site, job, spec, form = self.site, work.job, work.spec, work.notes.weights_layout
        if job.fingerprint_id is None:
            return  # a coordinator's job waits for an agent to bind it
        site.tell(job, "extracting", f"extracting tuning tasks ({form.value} weights"
                                     + (", or another form the registry covers better)"
                                        if spec.weights_layout == AUTO else ")"))
        loaded, target = self._loaded(work), self._target(work)
        with site.ir_lock:  # matching tasks to stored workloads parses and compares IR
            work.planned = planned = steps.plan(loaded, target, site.database(job), spec, form)
        notes: dict[str, Any] = {}
        if planned.choice is not None:
            site.tell(job, "layout", f"{planned.form.value} weights: {planned.choice.why}")
            notes.update(weights_layout=planned.form, weights_layout_choice=planned.choice)
        if spec.until is None:
            reused = planned.reused
            assert reused is not None
            tuning = (f"tuning {len(reused.tasks)} of {len(planned.tasks)} tasks ({planned.form.value} weights), "
                      f"{reused.budget.max_trials_global} trials") if reused.tasks else "nothing to tune"
            start = TuningStart(planned, f"running: {tuning}", reused.plan.trials,
                                {**notes, "reused": reused.plan.summary(), "trial_plan": reused.trial_plan})
        else:
            goal, judge = self._goal(work, spec)
            rounds = TuningInRounds(spec.until, planned.tasks, planned.budget, loaded, target, planned.form, judge,
                                    lambda: site.database(job), site.ir_lock)
            budget = planned.budget.max_trials_global
            start = TuningStart(planned, f"running: tuning {len(planned.tasks)} tasks in rounds until "
                                         f"{goal.goal.describe()} ({milliseconds(goal.goal_ms)}), at most {budget} "
                                         "trials", budget, notes, rounds, goal)
        if self._stopped(work, JobState.QUEUED):
            return
        site.start_tuning(work, start, self._driver(work, JobState.QUEUED))

    def _end_tuning(self, work: JobWork) -> None:
        """running -> building, once the tuning ended; or cancelled, or failed for its candidates."""
        tuned = self.site.tuned(work)
        if tuned is None:
            return
        work.tuned = tuned
        job = work.job = self.store.get_job(work.job.id)
        driver = self._driver(work, JobState.RUNNING)
        if tuned.rounds is not None:
            self.site.tell(job, "until", tuned.rounds.summary())
            try:
                self.store.update_job(job.id, expect_state=JobState.RUNNING.value,
                                      options=noted(job, until=tuned.rounds))
            except RegistryError:
                return  # moved meanwhile by another process

        if tuned.cancelled is not None:
            driver.cancel(f"{tuned.cancelled} after {tuned.trials} trials")
        elif tuned.failure is not None:
            driver.fail(tuned.failure, CANDIDATES_FAILED)
        else:
            driver.advance(JobState.BUILDING, f"building: {tuned.rounds.summary()}" if tuned.rounds else BUILDING)

    def _build(self, work: JobWork) -> None:
        """building -> validating: the library with the best records and the untuned reference, offered
        for validation."""
        site, job = self.site, work.job
        if site.validation_pending(work):  # built before a restart; only the move was lost
            self._driver(work, JobState.BUILDING).advance(JobState.VALIDATING,
                                                          VALIDATING.format(where=site.validating_where(work)))
            return
        site.tell(job, "building", BUILDING.removeprefix("building: "))
        loaded, target, database = self._loaded(work), self._target(work), site.database(job)
        form = work.notes.weights_layout
        library, reference = site.built_before(work)
        with site.ir_lock:
            built = steps.build(loaded, target, database, form, library=library, reference=reference)
            tasks = work.planned.tasks if work.planned is not None else None
            if tasks is None:  # planned by another process, or before a restart: extracted as the build lowers them
                from foundation.compile import extract_tuning_tasks

                tasks = extract_tuning_tasks(loaded, target, prepack=form.prepacks,
                                             block_activations=form.blocks_activations)
            found = built_untuned(tasks, database)
        self.store.update_job(job.id, options=noted(self.store.get_job(job.id), built_untuned=found))
        line = describe_built_untuned(found)
        if line:
            site.tell(job, "untuned", line)
        if self._stopped(work, JobState.BUILDING):
            return
        site.start_validation(work, built)
        self._driver(work, JobState.BUILDING).advance(JobState.VALIDATING,
                                                      VALIDATING.format(where=site.validating_where(work)))

    def _validate(self, work: JobWork) -> None:
        """validating -> succeeded, the library kept committed; or failed on the validation's verdict."""
        with self._committing:
            work.job = job = self.store.get_job(work.job.id)
            if work.state is not JobState.VALIDATING:
                return
            validated = self.site.validated(work)
            if validated is None:
                return
            driver = self._driver(work, JobState.VALIDATING)
            if validated.check is None:
                driver.fail(f"validation could not run: {validated.could_not_run}"[:4000], NOT_VALIDATED)
                return
            failure = steps.failed_validation(validated.check)
            if failure is not None:
                driver.fail(failure, VALIDATION_FAILED)
                return
            if self._stopped(work, JobState.VALIDATING):
                return
            # An artifact committed before a restart is kept.
            artifact = next((a for a in self.store.list_artifacts(model_id=job.model_id,
                                                                  fingerprint_id=job.fingerprint_id)
                             if a.job_id == job.id), None)
            committed = steps.commit(self.store, job, validated.check, validated.library_of,
                                     tvm_version=self.site.tvm_version, software=self.site.software(job),
                                     committed=artifact)
            kept = committed.kept
            if kept.speed is not None:
                self.site.tell(job, "speed" if not kept.speed.slower_than_untuned else "WARNING",
                               kept.speed.describe())
            work.artifact = committed.artifact
            if driver.advance(JobState.SUCCEEDED, f"{kept.status}{validated.where}", artifact_id=committed.artifact.id):
                self.site.succeeded(work, committed)

    # -- what the steps share -----------------------------------------------------------------

    def _driver(self, work: JobWork, state: JobState) -> JobDriver:
        return JobDriver(self.moves, work.job.id, state)

    def _stopped(self, work: JobWork, state: JobState) -> bool:
        """Whether the job is no longer the step's: moved meanwhile by another process, or cancelled now
        because this process was asked to."""
        now = self.store.get_job(work.job.id)
        if now.state is not state:
            return True
        reason = self.site.cancel_requested(now)
        if reason is not None:
            self._driver(work, state).cancel(reason)
            return True
        return False

    def _loaded(self, work: JobWork) -> "LoadedModel":
        if work._loaded is None:
            work._loaded = self.site.model(work.job)
        return work._loaded

    def _target(self, work: JobWork) -> "tvm.target.Target":
        if work._target is None:
            work._target = self.site.target(work.job)
        return work._target

    def _goal(self, work: JobWork, spec: JobSpec):
        """What the rounds must beat: onnxruntime, checked against the untuned build and timed here now,
        or the latency given."""
        site, job, until = self.site, work.job, spec.until
        assert until is not None
        if until.goal.reference == "onnxruntime":
            site.tell(job, "reference", "checking onnxruntime against TVM's untuned build, and timing it on this box")
        with site.ir_lock:
            outcome, judge = set_up_goal(until, self._loaded(work), self._target(work), spec.seed, site.onnx_file(job))
        if outcome.reference is not None:
            site.tell(job, "reference", f"onnxruntime: {milliseconds(outcome.reference.median_ms)} median of "
                                        f"{outcome.reference.runs} runs; its outputs agree with TVM's "
                                        f"(max abs err {outcome.reference_check.max_abs_err:.3g})")
        return outcome, judge


def target_of(job: "Job") -> "tvm.target.Target":
    """The job's canonical target as TVM takes it, with the tensor intrinsics its kind needs."""
    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    target_doc = json.loads(job.target)
    install_lean_tensor_intrinsics(target_doc["kind"])
    return to_tvm_target(target_doc)
