"""The embedded farm: a whole job (hit lookup, tuning, build, validation, commit) in-process.

This composes the foundation's parts on one box: the registry, task extraction and builds,
the fingerprint, the tuner and validation, with the job driver (foundation.job_driver)
moving the job through its states exactly as the coordinator does. It is what `farm submit`
does when no coordinator is configured.

Nothing is lost and nothing is stuck:
- the job records this process as its runner and beats a heartbeat, so a reader fails the
  job if this process dies (foundation.job_driver.runners), keeping the records measured;
- a cancel (a signal, or `farm cancel` read by the heartbeat) stops tuning after the batch
  in flight, whose records are committed, and ends the job `cancelled`;
- a second submit of a scope being tuned waits for the first (the tuning lock) and answers
  from the registry: one scope is never tuned twice at once;
- submits from several threads of one process run their jobs one at a time (TVM's IR is the
  process's: foundation.tvm_ir_lock); a registry hit waits for nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from farm.session import FarmContext, open_context
from farm.tuning_rounds import summed_plan, tune_in_rounds
from foundation import config
from foundation.domain.job_spec import (
    DEFAULT_VALIDATION_RUNS,
    EMBEDDED,
    JobNotes,
    JobSpec,
    SpecError,
    job_notes,
    noted,
    stored_options,
)
from foundation.domain.jobs import JobState
from foundation.domain.reuse import ReuseMode, default_mode
from foundation.domain.weights_layout import (
    AUTO,
    LayoutChoice,
    WeightsLayout,
    auto_forms,
    check_request,
    weights_layout_for,
)
from foundation.errors import BadInput, FarmError, Interrupted, JobFailed
from foundation.job_driver import steps
from foundation.job_driver.artifacts import (
    artifact_json,
    hit_form_why,
    look_up_fastest_hit,
    look_up_hit,
    record_hit,
)
from foundation.job_driver.built_untuned import built_untuned, describe_built_untuned
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.driver import (
    JobDriver,
    RegistryJobMoves,
    tuning_failure,
)
from foundation.job_driver.library_scopes import LibraryScope, library_scopes
from foundation.job_driver.rounds_loop import TuningInRounds
from foundation.job_driver.runners import Heartbeat, fail_dead_jobs, this_runner
from foundation.job_driver.tuning_lock import ScopeLock, scope_key
from foundation.job_driver.tuning_rounds import RoundsOutcome, UntilRequest, check_until, set_up_goal
from foundation.meta_schedule.tuner import MeasureSettings, ProgressListener, TuningReport, WorkerPools
from foundation.meta_schedule.warm.job_start import learn_from_job, warm_start_for, warm_start_json, warm_start_use
from foundation.models.model_key import ModelKey, model_key
from foundation.tvm_ir_lock import TVM_IR_LOCK
from foundation.units import milliseconds

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.reuse import ReusePlan
    from foundation.domain.trial_plan import TrialPlan
    from foundation.registry.entities import Artifact, Job
    from foundation.runtime.validation import LibraryCheck


# How often a submit waiting for another thread's job looks at its own cancellation.
TURN_POLL_S = 0.5


class JobObserver(ProgressListener, Protocol):
    """What a caller of `submit` is told: stage changes plus per-task tuning progress."""

    def stage(self, state: str, detail: str) -> None: ...

    def planned(self, plan: dict) -> None:
        """The trial plan (TrialPlan.to_json), before tuning starts."""

    # Optional: `job_started(job_id)`, called once the tuning job's row exists (farm.submit_handle).


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


@dataclass
class SubmitRequest:
    model: str | ModelKey  # a name or path, or a model already keyed (in memory: farm.model_sources)
    target: str
    batch: int
    registry: str | None = None
    trials: int | None = None
    trials_per_task: int | None = None
    retune: bool = False
    # foundation.domain.reuse.ReuseMode; None: its default_mode (auto, or off with --retune)
    reuse: str | None = None
    seed: int = 0
    warm_start: bool = True  # seed from similar workloads and start from a trained cost model
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    validation_runs: int = DEFAULT_VALIDATION_RUNS
    weights_layout: str = AUTO  # auto, plain, prepacked or prepacked-nchwc (foundation.domain.weights_layout)
    until: UntilRequest | None = None  # tune in rounds until the model is good enough
    # A compatible fingerprint (this CPU at another size) whose library answers; None: this box's,
    # else the nearest compatible one's (foundation.job_driver.library_scopes).
    fingerprint: str | None = None

    def job_spec(self) -> JobSpec:
        """What the job is asked to do (its registry, model, target and measuring are the submit's own);
        BadInput for what cannot be."""
        try:
            reuse = ReuseMode(self.reuse) if self.reuse else default_mode(self.retune)
        except ValueError:
            raise BadInput(f"unknown reuse mode {self.reuse!r}",
                           f"use one of {', '.join(m.value for m in ReuseMode)}") from None
        try:
            return JobSpec(mode=EMBEDDED, weights_layout=self.weights_layout, trials=self.trials,
                           trials_per_task=self.trials_per_task, retune=self.retune, reuse=reuse, seed=self.seed,
                           warm_start=self.warm_start, validation_runs=self.validation_runs, until=self.until)
        except SpecError as err:
            raise BadInput(str(err)) from None


@dataclass
class SubmitResult:
    job: "Job"
    cache_hit: bool
    fingerprint: str
    model: ModelKey
    target: str
    artifact: "Artifact | None"
    weights_layout: WeightsLayout
    report: TuningReport | None = None
    seconds: float = 0.0
    reuse: "ReusePlan | None" = None
    plan: "TrialPlan | None" = None
    until: RoundsOutcome | None = None
    layout_choice: LayoutChoice | None = None  # which form and why (auto may leave its default)

    def to_json(self) -> dict:
        """The job's document (as `farm status --json` prints it), with what this submit adds and knows
        first-hand: its tasks, timings and reuse."""
        from farm.registry_jobs import job_document

        out = {
            **job_document(self.job, self.model.name, self.model.batch, self.artifact),
            "job": self.job.id,
            "state": self.job.state,
            "cache_hit": self.cache_hit,
            "trials": self.report.trials if self.report else self.job.trials_done,
            "fingerprint": self.fingerprint,
            "model": self.model.name,
            "batch": self.model.batch,
            "target": self.target,
            "weights_layout": self.weights_layout.value,
            "weights_layout_choice": self.layout_choice.to_json() if self.layout_choice else None,
            "error": self.job.error,
            "seconds": round(self.seconds, 3),
            "artifact": artifact_json(self.artifact) if self.artifact else None,
            "built_untuned": job_notes(self.job).built_untuned,  # tasks the library compiled untuned
        }
        if self.artifact:  # loud: the tuned library timed slower than the untuned build (which was then kept)
            out["slower_than_untuned"] = out["artifact"]["slower_than_untuned"]
        if self.plan:
            out["trial_plan"] = self.plan.to_json()
        if self.until:
            out["until"] = self.until.to_json()
        if self.report:
            out["tasks"] = [t.to_json() for t in self.report.tasks]
            out["measure_errors"] = self.report.errors
            out["tuning_seconds"] = round(self.report.seconds, 3)
            out["first_build_at"] = self.report.first_build_at
            out["warm_start"] = warm_start_json(self.report)
        if self.reuse:
            out["reuse"] = {**self.reuse.summary(), "per_task": [t.to_json() for t in self.reuse.tasks]}
        return out


def submit(request: SubmitRequest, observer: JobObserver | None = None,
           cancellation: Cancellation | None = None) -> SubmitResult:
    """Answer from the registry if it can; otherwise tune, build, validate and commit.

    Returns the job however it ended (succeeded, failed, cancelled); raises FarmError for
    bad input, and Interrupted when cancelled before a job existed.
    """
    begin = time.monotonic()
    cancellation = cancellation or Cancellation()
    tell = observer.stage if observer else (lambda state, detail: None)
    key = request.model if isinstance(request.model, ModelKey) else model_key(request.model, request.batch)
    if key.source == "onnx":  # a file that is no ONNX model is refused before the registry is opened or made
        from foundation.models.onnx_import import read_model

        read_model(key.path)
    check_request(request.weights_layout)
    spec = request.job_spec()
    if request.until is not None:
        check_until(request.until)
    # An embedded submit tunes here: a target this CPU cannot run is refused before anything.
    ctx = open_context(request.registry, request.target, create=True, tuning_here=True)
    layout = weights_layout_for(request.weights_layout, ctx.target["kind"])
    if request.warm_start:
        _load_shipped_packs(ctx, tell)
    for job in fail_dead_jobs(ctx.store):
        tell("cleaned", f"{job.id} was left running by a process that died: marked failed")
    lock = ScopeLock(ctx.store, scope_key(key, ctx.target_json, ctx.fingerprint.id, ctx.tvm_version),
                     f"{key.describe()} for {ctx.target_json} on {ctx.fingerprint.id}", this_runner())
    waited_for: str | None = None
    has_turn = False
    try:
        while True:
            _stop_if_cancelled(cancellation)
            hit = _verified_hit(ctx, key, request, layout, waited_for, tell)
            if hit is not None:
                form = WeightsLayout(hit.weights_layout)
                choice = LayoutChoice(form, hit_form_why(hit, layout) if request.weights_layout == AUTO
                                      else f"asked for with --weights-layout {request.weights_layout}")
                job = record_hit(ctx.store, hit, ctx.target_json, ctx.fingerprint.id,
                                 stored_options(spec, JobNotes(form, choice.to_json())))
                return SubmitResult(job, True, ctx.fingerprint.id, key, ctx.target_json, hit, form,
                                    seconds=time.monotonic() - begin, layout_choice=choice)
            if not has_turn:
                waited = _take_turn(cancellation, tell)
                has_turn = True
                if waited:
                    continue  # the job it waited for may have made the library this one wants
            # The scope lock tells runners apart, not threads: this process's other jobs wait above.
            holder = lock.try_take()
            if holder is None:
                break
            tell("waiting", f"{holder.job_id or 'another submit'} ({holder.runner.describe()}) is tuning "
                            f"{key.describe()} for this target: waiting for it to finish")
            holder = lock.wait_released(holder, cancellation.event)
            waited_for = holder.job_id or "another submit"
        return _tune_build_commit(ctx, key, request, spec, layout, lock, observer, cancellation, begin)
    finally:
        lock.release()
        if has_turn:
            TVM_IR_LOCK.release()


def _take_turn(cancellation: Cancellation, tell) -> bool:
    """This thread's turn to run a job in this process (foundation.tvm_ir_lock); whether it waited for
    another thread's job to end first."""
    if TVM_IR_LOCK.acquire(blocking=False):
        return False
    waiting = ("another farm.submit in this process is running its job: waiting for it to end "
               "(one job at a time in a process: TVM's IR builders are not thread-safe)")
    tell("waiting", waiting)
    logging.getLogger(__name__).info(waiting)  # a Python caller has no observer
    while not TVM_IR_LOCK.acquire(timeout=TURN_POLL_S):
        _stop_if_cancelled(cancellation)
    return True


def _load_shipped_packs(ctx: FarmContext, tell) -> None:
    """A new registry starts with what tvm-farm ships (foundation.registry.shipped_packs)."""
    from foundation.registry.shipped_packs import is_new, load_shipped_packs, shipped_packs

    if not config.shipped_packs_wanted() or not shipped_packs() or not is_new(ctx.store):
        return
    for name, counts in load_shipped_packs(ctx.store).items():
        tell("packs", f"{name}: {counts.records:,} records of {counts.fingerprints} fingerprints into the new registry")


def _verified_hit(ctx: FarmContext, key: ModelKey, request: SubmitRequest, layout: WeightsLayout,
                  waited_for: str | None, tell) -> "Artifact | None":
    """The artifact to answer with: the newest intact one; with --retune only after waiting
    for another submit, and only the one that submit committed."""
    if request.retune and waited_for is None:
        return None
    own = LibraryScope(ctx.fingerprint.id, ctx.target_json)
    # Without a library of its own, a box is answered by one of the same hardware at another size
    # (or the one --fingerprint names); --retune is answered only by the one its wait ended on.
    scopes = [own] if request.retune else library_scopes(
        ctx.store, ctx.target_json, ctx.fingerprint.id, ctx.fingerprint.details, chosen=request.fingerprint)
    for scope in scopes:
        if request.weights_layout == AUTO:  # auto is answered by the fastest library of any form it may take
            lookup = look_up_fastest_hit(ctx.store, key, scope.target_json, scope.fingerprint_id, ctx.tvm_version,
                                         auto_forms(ctx.target["kind"]))
        else:
            lookup = look_up_hit(ctx.store, key, scope.target_json, scope.fingerprint_id, ctx.tvm_version, layout)
        for bad in lookup.invalidated:
            tell("invalid", f"artifact {bad.id} is corrupt ({bad.invalid_reason}): marked invalid, never a hit again")
        if lookup.artifact is None:
            continue
        if request.retune:
            return lookup.artifact if lookup.artifact.job_id == waited_for else None
        if not scope.is_own(ctx.fingerprint.id):
            # The job answered here is this box's: its fingerprint may be new to the registry.
            fp = ctx.fingerprint
            ctx.store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)
            tell("compatible", f"answered by the library tuned on {scope.fingerprint_id}, this CPU at another size "
                               f"(`farm run` times it here; `--retune` tunes one for {ctx.fingerprint.id})")
        return lookup.artifact
    return None


def _tune_build_commit(ctx: FarmContext, key: ModelKey, request: SubmitRequest, spec: JobSpec, layout: WeightsLayout,
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


def _stop_if_cancelled(cancellation: Cancellation) -> None:
    if cancellation.is_set():
        raise Interrupted(f"{cancellation.reason} before any job started", "nothing was written",
                          signum=cancellation.signum or 2)


__all__ = ["Cancellation", "FarmError", "SubmitRequest", "SubmitResult", "artifact_json", "submit"]
