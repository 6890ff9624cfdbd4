"""An embedded job once it is this process's to run: the job's recipe (foundation.job_driver.pipeline) advanced
here until the job ends, its tuning and validation run in this process, under the scope's tuning lock and
this process's heartbeat (its admission, foundation.job_driver.embedded_admission, decides whether it runs and
writes its rows)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from farm.session import FarmContext
from farm.submit_values import JobObserver, SubmitResult
from farm.tuning_rounds import summed_plan, tune_in_rounds
from foundation import config
from foundation.domain.job_spec import noted
from foundation.domain.jobs import JobState
from foundation.domain.trial_phases import merged
from foundation.hardware.device_features import DEVICE_KEY
from foundation.job_driver import steps
from foundation.job_driver.cancellation import Cancellation
from foundation.job_driver.driver import JobDriver, RegistryJobMoves, tuning_failure
from foundation.job_driver.embedded_admission import EmbeddedAdmission
from foundation.job_driver.pipeline import JobPipeline, JobWork, Tuned, TuningStart, Validated
from foundation.job_driver.runners import Heartbeat
from foundation.job_driver.tuning_lock import ScopeLock
from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
from foundation.meta_schedule.tuner import TuningReport
from foundation.meta_schedule.warm.job_start import learn_from_job, warm_start_for, warm_start_use
from foundation.models.model_key import ModelKey
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.domain.trial_plan import TrialPlan
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Job


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


def tune_build_commit(ctx: FarmContext, admission: EmbeddedAdmission, measure: MeasureSettings,
                      observer: JobObserver | None, cancellation: Cancellation, begin: float) -> SubmitResult:
    """Run a job here under the tuning lock ``admission`` holds, with this process's heartbeat beating the lock
    and the job."""
    from foundation.models.loading import load_model

    key, lock = admission.asked.key, admission.lock
    tell = observer.stage if observer else (lambda state, detail: None)
    # Nothing is printed or written before the model loads: a broken file is refused cleanly.
    loaded = load_model(str(key.path) if key.path else key.name, key.batch)
    tell("loaded", f"{key.describe()}: {loaded.num_parameters:,} parameters")
    heartbeat = Heartbeat(ctx.store, lock.runner, lambda: cancellation.request("cancelled by `farm cancel`"))
    heartbeat.lock_scope = lock.scope
    heartbeat.start()
    try:
        job = admission.new_job(loaded)
        site = HereSite(ctx, key, loaded, measure, heartbeat, observer, cancellation)
        site.started(job)
        return site.run(job, lock, begin)
    finally:
        heartbeat.stop()


class HereSite:
    """The embedded mode's JobSite: a job tuned and validated in this process, its progress told to the
    caller's observer; `run` advances it until it ends."""

    ir_lock = TVM_IR_LOCK  # held already by this thread, for the whole job (farm.embedded)

    def __init__(self, ctx: FarmContext, key: ModelKey, loaded: "LoadedModel", measure: MeasureSettings,
                 heartbeat: Heartbeat, observer: JobObserver | None, cancellation: Cancellation):
        self.ctx = ctx
        self.key = key
        self.loaded = loaded
        self.tvm_version = ctx.tvm_version
        self.heartbeat = heartbeat
        self.observer = observer
        self.cancellation = cancellation
        self._tell = observer.stage if observer else (lambda state, detail: None)
        self.tally = _TrialTally(observer)
        self.pools = WorkerPools(measure)
        self.report: TuningReport | None = None
        self.trial_plan: "TrialPlan | None" = None
        self._start: TuningStart | None = None
        self._library: bytes | None = None  # the last round's build, when tuned in rounds
        self._built: steps.Built | None = None
        self._database: Any = None

    def started(self, job: "Job") -> None:
        """The job named on the heartbeat, which writes its trials from now on, and told to a caller waiting
        for its id."""
        self.heartbeat.job_id = job.id
        if self.observer is not None and hasattr(self.observer, "job_started"):  # a caller waiting for the id
            self.observer.job_started(job.id)
        self.heartbeat.count_trials(lambda: self.tally.trials)

    def run(self, job: "Job", lock: ScopeLock, begin: float) -> SubmitResult:
        """The job advanced until it ends; an error, or a Python caller's Ctrl-C, ends a job not ended yet."""
        store = self.ctx.store
        pipeline = JobPipeline(store, RegistryJobMoves(store), self)
        work = JobWork(job)
        forget_last_words = self.cancellation.on_abandon(lambda: _abandon(store, job.id, work.state, lock))
        try:
            while not work.state.is_final:
                before = work.state
                pipeline.advance(work)
                # Here every step ends in a move: its own, another process's, or a cancel.
                assert work.state is not before, f"job {job.id} stayed {before.value}"
        except BaseException as err:
            work.job = store.get_job(job.id)
            if not work.state.is_final:
                done = {"trials_done": self.report.trials} if self.report else {}
                driver = JobDriver(RegistryJobMoves(store), job.id, work.state)
                if isinstance(err, KeyboardInterrupt):  # a Python caller's Ctrl-C (the CLI turns signals into cancels)
                    driver.cancel("interrupted", **done)
                else:
                    driver.fail(f"{type(err).__name__}: {err}"[:2000], "failed: an error", **done)
            raise
        finally:
            forget_last_words()
            self.pools.close()
        planned = work.planned
        return SubmitResult(work.job, False, self.ctx.fingerprint.id, self.key, self.ctx.target_json, work.artifact,
                            planned.form if planned else work.notes.weights_layout, self.report,
                            time.monotonic() - begin,
                            planned.reused.plan if planned and planned.reused else None, self.trial_plan,
                            work.tuned.rounds if work.tuned else None, planned.choice if planned else None)

    # -- JobSite ---------------------------------------------------------------------------------

    def model(self, job: "Job") -> "LoadedModel":
        return self.loaded

    def target(self, job: "Job"):
        return self.ctx.tvm_target()

    def database(self, job: "Job") -> Any:
        if self._database is None:
            from foundation.meta_schedule.database.registry_database import tvm_database_for

            ctx = self.ctx
            self._database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version,
                                              ctx.software, job_id=job.id)
        return self._database

    def software(self, job: "Job") -> dict:
        return self.ctx.software

    def onnx_file(self, job: "Job") -> bytes | None:
        key = self.key
        return key.path.read_bytes() if key.source == "onnx" and key.path else None

    def tell(self, job: "Job", stage: str, detail: str) -> None:
        self._tell(stage, detail)

    def cancel_requested(self, job: "Job") -> str | None:
        return self.cancellation.reason if self.cancellation.is_set() else None

    def start_tuning(self, work: JobWork, start: TuningStart, driver: JobDriver) -> None:
        self._start = start
        options = noted(work.job, **start.notes)
        if start.rounds is None:
            assert start.planned.reused is not None
            self.trial_plan = start.planned.reused.trial_plan
        if driver.advance(JobState.RUNNING, start.status, trials_budget=start.trials_budget, options=options) \
                and self.trial_plan is not None and self.observer:
            self.observer.planned(self.trial_plan.to_json())

    def tuned(self, work: JobWork) -> Tuned:
        start = self._start
        assert start is not None, "an embedded job is planned by this process"
        rounds = self._tune_in_rounds(work, start) if start.rounds is not None else self._tune(work, start)
        report = self.report
        assert report is not None
        self.heartbeat.count_trials(None)
        self.ctx.store.update_job(work.job.id, trials_done=report.trials)
        # The build wants the CPUs and memory the workers hold, and the library is timed
        # with no worker process about (bench/quiet_timing.py).
        self.pools.close()
        if report.cancelled or self.cancellation.is_set():
            return Tuned(report.trials, cancelled=self.cancellation.reason, rounds=rounds)
        return Tuned(report.trials, rounds=rounds, failure=tuning_failure(report.tasks))

    def _tune(self, work: JobWork, start: TuningStart) -> None:
        """Seeds found and the planned tasks tuned here."""
        from foundation.meta_schedule import tuner

        ctx, store, job, spec, tell = self.ctx, self.ctx.store, work.job, work.spec, self._tell
        reused = start.planned.reused
        assert reused is not None
        tell("reuse", reused.plan.describe())
        if spec.warm_start and reused.tasks:
            tell("warming", "looking for seeds among similar workloads' records")
        seeds = steps.seeds(store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, spec, reused.tasks,
                            reused.tuned_plan.trials)
        warm = (warm_start_for(store, ctx.fingerprint.id, ctx.tvm_version, seeds.traces, seeds.per_task)
                if seeds.per_task else None)
        tell("running", start.status.removeprefix("running: "))
        device = ctx.fingerprint.details.get(DEVICE_KEY) or {}
        self.report = tuner.tune(reused.tasks, self.target(job), self.database(job), reused.budget,
                                 config.job_work_dir(job.id), pools=self.pools, listener=self.tally,
                                 cancelled=self.cancellation.event, seed=spec.seed, plan=reused.tuned_plan, warm=warm,
                                 peak_gflops=device.get("peak_gflops"))
        if reused.tasks:
            notes = {"warm_start_used": warm_start_use(self.report, warm)}
            if self.report.plan is not None:  # two phases: what each gave
                self.trial_plan = merged(reused.trial_plan, self.report.plan)
                notes["trial_plan"] = self.trial_plan
            store.update_job(job.id, options=noted(store.get_job(job.id), **notes))

    def _tune_in_rounds(self, work: JobWork, start: TuningStart):
        """The tasks tuned here in rounds until good enough (`--until`)."""
        store, job, spec = self.ctx.store, work.job, work.spec
        rounds, outcome = start.rounds, start.goal
        assert rounds is not None and outcome is not None
        tuned = tune_in_rounds(rounds, outcome, config.job_work_dir(job.id), pools=self.pools, observer=self.tally,
                               cancelled=self.cancellation.event, seed=spec.seed, tell=self._tell,
                               on_round=lambda so_far: store.update_job(job.id, trials_done=so_far.trials))
        self.report = tuned.report
        self.trial_plan = summed_plan(tuned.plans, rounds.budget.max_trials_global) if tuned.plans else None
        store.update_job(job.id, options=noted(store.get_job(job.id), trial_plan=self.trial_plan))
        self._library = tuned.library
        return outcome

    def built_before(self, work: JobWork) -> tuple[bytes | None, bytes | None]:
        rounds = self._start.rounds if self._start else None
        return self._library, rounds.judge.reference_library if rounds else None

    def validation_pending(self, work: JobWork) -> bool:
        return False

    def start_validation(self, work: JobWork, built: "steps.Built") -> None:
        self._built = built
        self._tell("validating", self.validating_where(work))

    def validating_where(self, work: JobWork) -> str:
        return "comparing with the untuned build and timing"

    def validated(self, work: JobWork) -> Validated:
        built = self._built
        assert built is not None
        check = steps.validate(built, self.target(work.job).kind.name, self.loaded, work.spec)
        return Validated(check, lambda untuned: built.reference if untuned else built.library)

    def succeeded(self, work: JobWork, committed: "steps.Committed") -> None:
        ctx = self.ctx
        learn_from_job(ctx.store, ctx.fingerprint.id, self.target(work.job), ctx.tvm_version, self._tell)


def _abandon(store, job_id: str, state: JobState, lock: ScopeLock) -> None:
    """The last words of a job whose process exits at once (a second Ctrl-C)."""
    if not state.is_final:
        JobDriver(RegistryJobMoves(store), job_id, state).cancel("interrupted twice: stopped at once")
    lock.release()
