"""An embedded job once it is this process's to run: plan, (seeds and) tune, build, validate, commit,
under the scope's tuning lock and this process's heartbeat (farm.embedded decides whether it runs)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from farm.session import FarmContext
from farm.tuning_rounds import summed_plan, tune_in_rounds
from foundation import config
from foundation.domain.job_spec import (
    JobNotes,
    JobSpec,
    noted,
    stored_options,
)
from foundation.domain.jobs import JobState
from foundation.domain.weights_layout import (
    AUTO,
    LayoutChoice,
    WeightsLayout,
)
from foundation.errors import JobFailed
from foundation.job_driver import steps
from foundation.job_driver.built_untuned import built_untuned, describe_built_untuned
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.driver import (
    JobDriver,
    RegistryJobMoves,
    tuning_failure,
)
from foundation.job_driver.rounds_loop import TuningInRounds
from foundation.job_driver.runners import Heartbeat
from foundation.job_driver.tuning_lock import ScopeLock
from foundation.job_driver.tuning_rounds import RoundsOutcome, UntilRequest, set_up_goal
from foundation.meta_schedule.tuner import TuningReport, WorkerPools
from foundation.meta_schedule.warm.job_start import learn_from_job, warm_start_for, warm_start_use
from foundation.models.model_key import ModelKey
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.trial_plan import TrialPlan
    from foundation.registry.entities import Artifact
    from foundation.runtime.validation import LibraryCheck
from farm.submit_values import JobObserver, SubmitRequest, SubmitResult


class _TrialTally:
    """Passes tuning progress on to the caller's observer and counts the trials measured so
    far, which the heartbeat writes to the job while it tunes."""

    def __init__(self, observer: JobObserver | None):
        self.observer = observer
        self.trials = 0

    def started(self, tasks) -> None:
        if self.observer:
            self.observer.started(tasks)

    def measured(self, task, new_trials: int) -> None:
        self.trials += new_trials
        if self.observer:
            self.observer.measured(task, new_trials)

    def batch_measured(self, task) -> None:
        if self.observer:
            self.observer.batch_measured(task)

    def finished(self, tasks) -> None:
        if self.observer:
            self.observer.finished(tasks)

    def planned(self, plan: dict) -> None:
        if self.observer:
            self.observer.planned(plan)


def tune_build_commit(ctx: FarmContext, key: ModelKey, request: SubmitRequest, spec: JobSpec, layout: WeightsLayout,
                       lock: ScopeLock, observer: JobObserver | None, cancellation: Cancellation,
                       begin: float) -> SubmitResult:
    """Run a job under the tuning lock, with this process's heartbeat beating the lock and the job."""
    heartbeat = Heartbeat(ctx.store, lock.runner, lambda: cancellation.request("cancelled by `farm cancel`"))
    heartbeat.lock_scope = lock.scope
    heartbeat.start()
    try:
        return _run_job(ctx, key, request, spec, layout, lock, heartbeat, observer, cancellation, begin)
    finally:
        heartbeat.stop()


def _run_job(ctx: FarmContext, key: ModelKey, request: SubmitRequest, spec: JobSpec, layout: WeightsLayout,
             lock: ScopeLock, heartbeat: Heartbeat, observer: JobObserver | None, cancellation: Cancellation,
             begin: float) -> SubmitResult:
    """The job's pipeline, here: plan, (seeds and) tune, build, validate, commit; each step ends the job
    when it is cancelled or fails."""
    from foundation.models.loading import load_model

    tell = observer.stage if observer else (lambda state, detail: None)
    # Nothing is printed or written before the model loads: a broken file is refused cleanly.
    loaded = load_model(str(key.path) if key.path else key.name, key.batch)
    tell("loaded", f"{key.describe()}: {loaded.num_parameters:,} parameters")
    run = _JobRun(ctx, key, request, spec, layout, lock, heartbeat, observer, cancellation, begin, loaded)
    try:
        run.plan()
        tuned = run.tune() if run.planned.reused is not None else run.tune_in_rounds()
        if not tuned or not run.tuning_ended():
            return run.ended()
        built = run.build()
        if built is None:
            return run.ended()
        check = run.validate(built)
        if check is None:
            return run.ended()
        return run.commit(built, check)
    except BaseException as err:
        run.failed(err)
        raise
    finally:
        run.close()


class _JobRun:
    """One embedded job going through the pipeline's steps (foundation.job_driver.steps), and what the
    caller is told of it (SubmitResult)."""

    def __init__(self, ctx: FarmContext, key: ModelKey, request: SubmitRequest, spec: JobSpec,
                 layout: WeightsLayout, lock: ScopeLock, heartbeat: Heartbeat, observer: JobObserver | None,
                 cancellation: Cancellation, begin: float, loaded):
        self.ctx, self.key, self.spec, self.layout, self.loaded = ctx, key, spec, layout, loaded
        self.store = store = ctx.store
        self.heartbeat, self.observer, self.cancellation, self.begin = heartbeat, observer, cancellation, begin
        self.tell = observer.stage if observer else (lambda state, detail: None)
        store.upsert_fingerprint(ctx.fingerprint.id, ctx.fingerprint.kind, ctx.fingerprint.summary,
                                 ctx.fingerprint.details)
        model = store.upsert_model(
            model_id=loaded.identity(), name=key.name, source=key.source, source_digest=key.source_digest,
            batch=key.batch, inputs=[s.to_json() for s in loaded.inputs],
            weights=[s.to_json() for s in loaded.weights], num_parameters=loaded.num_parameters,
        )
        self.job = job = store.create_job(model_id=model.id, target=ctx.target_json, fingerprint_id=ctx.fingerprint.id,
                                          trials_budget=0, options=stored_options(spec, JobNotes(layout)),
                                          runner=lock.runner)
        lock.name_job(job.id)
        heartbeat.job_id = job.id
        if observer is not None and hasattr(observer, "job_started"):  # a caller waiting for the id
            observer.job_started(job.id)
        self.tally = _TrialTally(observer)
        heartbeat.count_trials(lambda: self.tally.trials)
        self.driver = driver = JobDriver(RegistryJobMoves(store), job.id, job.state)
        self.forget_last_words = cancellation.on_abandon(lambda: _abandon(store, job.id, driver.state, lock))
        self.pools = WorkerPools(request.measure)
        self.report: TuningReport | None = None
        self.reused = None
        self.trial_plan: "TrialPlan | None" = None
        self.rounds: RoundsOutcome | None = None
        self.choice: LayoutChoice | None = None
        self.library: bytes | None = None  # the last round's build, when tuned in rounds
        self.untuned: bytes | None = None  # the untuned build, when checking onnxruntime against it made one

    def ended(self, artifact: "Artifact | None" = None) -> SubmitResult:
        return SubmitResult(self.store.get_job(self.job.id), False, self.ctx.fingerprint.id, self.key,
                            self.ctx.target_json, artifact, self.layout, self.report, time.monotonic() - self.begin,
                            self.reused.plan if self.reused else None, self.trial_plan, self.rounds, self.choice)

    def move(self, new: JobState, status: str, **fields) -> None:
        if not self.driver.advance(new, status, **fields):
            job_id = self.job.id
            now = self.store.get_job(job_id)
            raise JobFailed(f"job {job_id} was ended by another process ({now.state}: {now.error})",
                            "see `farm status " + job_id + "`")

    def cancelled(self) -> bool:
        """Whether the job was cancelled (and is now ended so)."""
        if self.cancellation.is_set():
            self.driver.cancel(self.cancellation.reason)
            return True
        return False

    def plan(self) -> None:
        from foundation.meta_schedule.database.registry_database import tvm_database_for

        ctx, store, spec, layout = self.ctx, self.store, self.spec, self.layout
        self.target = ctx.tvm_target()
        self.tell("extracting", f"extracting tuning tasks ({layout.value} weights"
                                + (", or another form the registry covers better)"
                                   if spec.weights_layout == AUTO else ")"))
        self.database = tvm_database_for(store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version,
                                         ctx.software, job_id=self.job.id)
        self.planned = planned = steps.plan(self.loaded, self.target, self.database, spec, layout)
        self.choice, self.layout = planned.choice, planned.form
        if self.choice is not None:
            self.tell("layout", f"{self.layout.value} weights: {self.choice.why}")
            self.job = store.update_job(self.job.id, options=noted(store.get_job(self.job.id),
                                                                   weights_layout=self.layout,
                                                                   weights_layout_choice=self.choice.to_json()))

    def tune(self) -> bool:
        """Seeds found and the planned tasks tuned here; False if cancelled first."""
        from foundation.meta_schedule import tuner

        ctx, store, spec, job, tell = self.ctx, self.store, self.spec, self.job, self.tell
        self.reused = reused = self.planned.reused
        self.trial_plan = reused.trial_plan
        if self.cancelled():
            return False
        tuning = (f"tuning {len(reused.tasks)} of {len(self.planned.tasks)} tasks ({self.layout.value} weights), "
                  f"{reused.budget.max_trials_global} trials")
        if not reused.tasks:
            tuning = "nothing to tune"
        self.move(JobState.RUNNING, f"running: {tuning}", trials_budget=reused.plan.trials,
                  options=noted(job, reused=reused.plan.summary(), trial_plan=self.trial_plan.to_json()))
        if self.observer:
            self.observer.planned(self.trial_plan.to_json())
        tell("reuse", reused.plan.describe())
        if spec.warm_start and reused.tasks:
            tell("warming", "looking for seeds among similar workloads' records")
        seeds = steps.seeds(store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, spec, reused.tasks,
                            reused.tuned_plan.trials)
        warm = (warm_start_for(store, ctx.fingerprint.id, ctx.tvm_version, seeds.traces, seeds.per_task)
                if seeds.per_task else None)
        tell("running", tuning)
        self.report = tuner.tune(reused.tasks, self.target, self.database, reused.budget,
                                 config.job_work_dir(job.id), pools=self.pools, listener=self.tally,
                                 cancelled=self.cancellation.event, seed=spec.seed, plan=reused.tuned_plan, warm=warm)
        if reused.tasks:
            store.update_job(job.id, options=noted(store.get_job(job.id),
                                                   warm_start_used={"embedded": warm_start_use(self.report, warm)}))
        return True

    def tune_in_rounds(self) -> bool:
        """The tasks tuned here in rounds until good enough (`--until`); False if cancelled first."""
        store, spec, job, tell, planned = self.store, self.spec, self.job, self.tell, self.planned
        tasks, budget = planned.tasks, planned.budget
        self.rounds, judge = _goal(spec.until, self.key, self.loaded, self.target, spec.seed, tell)
        rounds = self.rounds
        self.untuned = judge.reference_library
        if self.cancelled():
            return False
        self.move(JobState.RUNNING, f"running: tuning {len(tasks)} tasks in rounds until {rounds.goal.describe()} "
                                    f"({milliseconds(rounds.goal_ms)}), at most {budget.max_trials_global} trials",
                  trials_budget=budget.max_trials_global)
        database = self.database
        in_rounds = TuningInRounds(spec.until, tasks, budget, self.loaded, self.target, self.layout, judge,
                                   lambda: database)
        tuned = tune_in_rounds(in_rounds, rounds, config.job_work_dir(job.id), pools=self.pools, observer=self.tally,
                               cancelled=self.cancellation.event, seed=spec.seed, tell=tell,
                               on_round=lambda so_far: store.update_job(job.id, trials_done=so_far.trials))
        self.report = tuned.report
        self.trial_plan = summed_plan(tuned.plans, budget.max_trials_global) if tuned.plans else None
        store.update_job(job.id, options=noted(job, until=rounds.to_json(),
                                               trial_plan=self.trial_plan.to_json() if self.trial_plan else None))
        tell("until", rounds.summary())
        self.library = tuned.library
        return True

    def tuning_ended(self) -> bool:
        """The tuning's trials kept with the job and its workers stopped; False if it was cancelled or every
        candidate of a task failed."""
        report = self.report
        self.heartbeat.count_trials(None)
        self.store.update_job(self.job.id, trials_done=report.trials)
        # The build wants the CPUs and memory the workers hold, and the library is timed
        # with no worker process about (bench/quiet_timing.py).
        self.pools.close()
        if report.cancelled or self.cancellation.is_set():
            self.driver.cancel(f"{self.cancellation.reason} after {report.trials} trials")
            return False
        failure = tuning_failure(report.tasks)
        if failure is not None:
            self.driver.fail(failure, "failed: its candidates failed")
            return False
        return True

    def build(self) -> "steps.Built | None":
        self.move(JobState.BUILDING, "building: compiling with the best records, and an untuned reference")
        self.tell("building", "compiling with the best records, and an untuned reference")
        # Tuning in rounds built the library after its last round, with the same records.
        built = steps.build(self.loaded, self.target, self.database, self.layout, library=self.library,
                            reference=self.untuned)
        _note_built_untuned(self.store, self.job.id, self.planned.tasks, self.database, self.tell)
        return None if self.cancelled() else built

    def validate(self, built: "steps.Built") -> "LibraryCheck | None":
        self.move(JobState.VALIDATING, "validating: comparing with the untuned build and timing")
        self.tell("validating", "comparing with the untuned build and timing")
        check = steps.validate(built, self.target.kind.name, self.loaded, self.spec)
        failure = steps.failed_validation(check)
        if failure is not None:
            self.driver.fail(failure, "failed: validation")
            return None
        return None if self.cancelled() else check

    def commit(self, built: "steps.Built", check: "LibraryCheck") -> SubmitResult:
        ctx, store = self.ctx, self.store
        committed = steps.commit(store, store.get_job(self.job.id), check,
                                 lambda untuned: built.reference if untuned else built.library,
                                 tvm_version=ctx.tvm_version, software=ctx.software)
        kept = committed.kept
        if kept.speed is not None:
            self.tell("speed" if not kept.speed.slower_than_untuned else "WARNING", kept.speed.describe())
        self.move(JobState.SUCCEEDED, kept.status, artifact_id=committed.artifact.id)
        learn_from_job(store, ctx.fingerprint.id, self.target, ctx.tvm_version, self.tell)
        return self.ended(committed.artifact)

    def failed(self, err: BaseException) -> None:
        """An error (or a Python caller's Ctrl-C) ends a job not ended yet, keeping the trials measured."""
        if not self.driver.state.is_final:
            done = {"trials_done": self.report.trials} if self.report else {}
            if isinstance(err, KeyboardInterrupt):  # a Python caller's Ctrl-C (the CLI turns signals into cancels)
                self.driver.cancel("interrupted", **done)
            else:
                self.driver.fail(f"{type(err).__name__}: {err}"[:2000], "failed: an error", **done)

    def close(self) -> None:
        self.forget_last_words()
        self.pools.close()


def _note_built_untuned(store, job_id: str, tasks, database, tell) -> None:
    """Keep with the job which tasks the library compiled untuned (foundation.job_driver.built_untuned)."""
    found = built_untuned(tasks, database)
    store.update_job(job_id, options=noted(store.get_job(job_id), built_untuned=found))
    line = describe_built_untuned(found)
    if line:
        tell("untuned", line)


def _goal(until: UntilRequest, key: ModelKey, loaded, target, seed: int, tell):
    """What the rounds must beat: onnxruntime, checked against the untuned build and timed here now,
    or the latency given."""
    if until.goal.reference == "onnxruntime":
        what = key.path.name if key.path else f"{key.name} (exported to ONNX)"
        tell("reference", f"checking onnxruntime on {what} against TVM's untuned build, and timing it on this box")
    onnx_file = key.path.read_bytes() if key.source == "onnx" and key.path else None
    outcome, judge = set_up_goal(until, loaded, target, seed, onnx_file)
    if outcome.reference is not None:
        tell("reference", f"onnxruntime: {milliseconds(outcome.reference.median_ms)} median of "
                          f"{outcome.reference.runs} runs; its outputs agree with TVM's "
                          f"(max abs err {outcome.reference_check.max_abs_err:.3g})")
    return outcome, judge


def _abandon(store, job_id: str, state: JobState, lock: ScopeLock) -> None:
    """The last words of a job whose process exits at once (a second Ctrl-C)."""
    if not state.is_final:
        JobDriver(RegistryJobMoves(store), job_id, state).cancel("interrupted twice: stopped at once")
    lock.release()
