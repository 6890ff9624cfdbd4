"""The embedded farm: a whole job (hit lookup, tuning, build, validation, commit) in-process.

This composes the coordinator's parts (registry, task extraction, build) with the agent's
(fingerprint, tuner, validation) on one box. It is what `farm submit` does when no
coordinator is configured.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from farm.session import FarmContext, open_context
from foundation import config
from foundation.domain.jobs import JobState, check_transition
from foundation.errors import FarmError, ValidationFailed
from foundation.job_driver.artifacts import artifact_json, commit_artifact, find_hit, record_hit
from foundation.meta_schedule.tuner import MeasureSettings, ProgressListener, TuningBudget, TuningReport, WorkerPools
from foundation.models.model_key import ModelKey, model_key

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Artifact, Job


class JobObserver(ProgressListener, Protocol):
    """What a caller of `submit` is told: stage changes plus per-task tuning progress."""

    def stage(self, state: str, detail: str) -> None: ...


@dataclass
class SubmitRequest:
    model: str
    target: str
    batch: int
    registry: str | None = None
    trials: int | None = None
    trials_per_task: int | None = None
    retune: bool = False
    seed: int = 0
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    validation_runs: int = 20


@dataclass
class SubmitResult:
    job: "Job"
    cache_hit: bool
    fingerprint: str
    model: ModelKey
    target: str
    artifact: "Artifact | None"
    report: TuningReport | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        out = {
            "job": self.job.id,
            "state": self.job.state,
            "cache_hit": self.cache_hit,
            "trials": self.report.trials if self.report else self.job.trials_done,
            "fingerprint": self.fingerprint,
            "model": self.model.name,
            "batch": self.model.batch,
            "target": self.target,
            "error": self.job.error,
            "seconds": round(self.seconds, 3),
            "artifact": artifact_json(self.artifact) if self.artifact else None,
        }
        if self.report:
            out["tasks"] = [t.to_json() for t in self.report.tasks]
            out["measure_errors"] = self.report.errors
            out["tuning_seconds"] = round(self.report.seconds, 3)
            out["first_build_at"] = self.report.first_build_at
        return out


def submit(request: SubmitRequest, observer: JobObserver | None = None,
           cancelled: threading.Event | None = None) -> SubmitResult:
    """Answer from the registry if it can; otherwise tune, build, validate and commit."""
    import time

    begin = time.monotonic()
    key = model_key(request.model, request.batch)
    ctx = open_context(request.registry, request.target)
    if not request.retune:
        hit = find_hit(ctx.store, key, ctx.target_json, ctx.fingerprint.id, ctx.tvm_version)
        if hit is not None:
            job = record_hit(ctx.store, hit, ctx.target_json, ctx.fingerprint.id, _options(request))
            return SubmitResult(job, True, ctx.fingerprint.id, key, ctx.target_json, hit,
                                seconds=time.monotonic() - begin)
    return _tune_build_commit(ctx, key, request, observer, cancelled, begin)


def _tune_build_commit(ctx: FarmContext, key: ModelKey, request: SubmitRequest,
                       observer: JobObserver | None, cancelled, begin: float) -> SubmitResult:
    import time

    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.meta_schedule import tuner
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model
    from foundation.runtime.validation import check_library

    tell = observer.stage if observer else (lambda state, detail: None)
    # Nothing is printed or written before the model loads: a broken file is refused cleanly.
    loaded = load_model(str(key.path) if key.path else key.name, key.batch)
    tell("loaded", f"{key.describe()}: {loaded.num_parameters:,} parameters")
    ctx.store.upsert_fingerprint(ctx.fingerprint.id, ctx.fingerprint.kind, ctx.fingerprint.summary,
                                 ctx.fingerprint.details)
    model = ctx.store.upsert_model(
        model_id=loaded.identity(), name=key.name, source=key.source, source_digest=key.source_digest,
        batch=key.batch, inputs=[s.to_json() for s in loaded.inputs],
        weights=[s.to_json() for s in loaded.weights], num_parameters=loaded.num_parameters,
    )
    job = ctx.store.create_job(
        model_id=model.id, target=ctx.target_json, fingerprint_id=ctx.fingerprint.id,
        trials_budget=0, options=_options(request),
    )
    state = JobState.QUEUED
    report = None
    try:
        tvm_target = ctx.tvm_target()
        tell("extracting", "extracting tuning tasks")
        tasks = extract_tuning_tasks(loaded, tvm_target)
        budget = TuningBudget.for_tasks(len(tasks), request.trials, request.trials_per_task)
        state = _advance(ctx, job.id, state, JobState.RUNNING, started_at=_now(),
                         trials_budget=budget.max_trials_global)
        database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version,
                                    ctx.software, job_id=job.id)
        tell("running", f"tuning {len(tasks)} tasks, {budget.max_trials_global} trials")
        pools = WorkerPools(request.measure)
        report = tuner.tune(
            tasks, tvm_target, database, budget, config.job_work_dir(job.id),
            pools=pools, listener=observer, cancelled=cancelled, seed=request.seed,
        )
        pools.close()  # the library is timed with no worker process about (bench/quiet_timing.py)
        ctx.store.update_job(job.id, trials_done=report.trials)
        if report.cancelled:
            state = _advance(ctx, job.id, state, JobState.CANCELLED, finished_at=_now(),
                             error="cancelled by the user")
            return SubmitResult(ctx.store.get_job(job.id), False, ctx.fingerprint.id, key,
                                ctx.target_json, None, report, time.monotonic() - begin)
        state = _advance(ctx, job.id, state, JobState.BUILDING)
        tell("building", "compiling with the best records, and an untuned reference")
        library = build_library(loaded, tvm_target, database)
        reference = build_library(loaded, tvm_target, None)
        state = _advance(ctx, job.id, state, JobState.VALIDATING)
        tell("validating", "comparing with the untuned build and timing")
        check = check_library(
            library, reference, tvm_target.kind.name,
            loaded.make_inputs(request.seed), loaded.make_weights(request.seed),
            runs=request.validation_runs,
        )
        if not check.validation.passed:
            reason = f"tuned library disagrees with the untuned build: {check.validation.reason}"
            state = _advance(ctx, job.id, state, JobState.FAILED, finished_at=_now(), error=reason)
            raise ValidationFailed(reason, "nothing was committed; retry with --retune or report the model")
        artifact = commit_artifact(
            ctx.store, model_id=model.id, target_json=ctx.target_json, fingerprint_id=ctx.fingerprint.id,
            job_id=job.id, library=library, latency=check.latency, untuned_latency=check.untuned_latency,
            validation=check.validation, tvm_version=ctx.tvm_version, software=ctx.software,
        )
        state = _advance(ctx, job.id, state, JobState.SUCCEEDED, finished_at=_now(), artifact_id=artifact.id)
        return SubmitResult(ctx.store.get_job(job.id), False, ctx.fingerprint.id, key, ctx.target_json,
                            artifact, report, time.monotonic() - begin)
    except BaseException as err:
        if not state.is_final:
            why = "interrupted" if isinstance(err, KeyboardInterrupt) else f"{type(err).__name__}: {err}"
            final = JobState.CANCELLED if isinstance(err, KeyboardInterrupt) else JobState.FAILED
            _advance(ctx, job.id, state, final, finished_at=_now(), error=why[:2000],
                     trials_done=report.trials if report else 0)
        raise


def _advance(ctx: FarmContext, job_id: str, current: JobState, new: JobState, **fields) -> JobState:
    check_transition(current, new)
    ctx.store.update_job(job_id, state=new.value, **fields)
    return new


def _options(request: SubmitRequest) -> dict:
    return {
        "trials": request.trials,
        "trials_per_task": request.trials_per_task,
        "retune": request.retune,
        "seed": request.seed,
        "mode": "embedded",
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


__all__ = ["SubmitRequest", "SubmitResult", "submit", "artifact_json", "FarmError"]
