"""`farm submit --dry-run`: the plan a submit would tune by, made by the job's own plan step, with nothing written.

The model, target and fingerprint are resolved as a submit resolves them and the tasks extracted and
planned by foundation.job_driver.steps.plan (the layout choice, trials per task, what reuse skips);
no job, lock, fingerprint or record is written. The time is estimated from this fingerprint's past
jobs in the registry: their trials over their running time, build and validation included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from farm.dry_run_plan import DryRunPlan
from farm.session import FarmContext, open_context
from foundation.domain.jobs import FINAL_STATES
from foundation.domain.weights_layout import weights_layout_for
from foundation.hardware.targets import local_target
from foundation.models.model_key import model_key

if TYPE_CHECKING:  # pragma: no cover
    from farm.submit_values import SubmitRequest
    from foundation.registry.store import RegistryStore

RATE_JOBS = 20  # the newest finished jobs of the fingerprint the rate is taken from


def plan_submit(request: "SubmitRequest") -> DryRunPlan:
    """What ``request`` would tune here; FarmError for what a submit refuses."""
    from foundation.job_driver import steps
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model
    from foundation.registry.engine import RegistryMissing
    from foundation.tvm_ir_lock import TVM_IR_LOCK

    key = model_key(request.model, request.batch)
    spec = request.job_spec()
    try:
        ctx = open_context(request.registry, request.target, tuning_here=True)
    except RegistryMissing:
        ctx = _empty_context(request.target)
    layout = weights_layout_for(request.weights_layout, ctx.target["kind"])
    loaded = load_model(str(key.path) if key.path else key.name, key.batch)
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    with TVM_IR_LOCK:
        planned = steps.plan(loaded, ctx.tvm_target(), database, spec, layout)
    reused = planned.reused
    hit = None if request.retune else _stored_library(ctx, key, request)
    return DryRunPlan(
        model=key.name, batch=key.batch, target=ctx.target_json, fingerprint=ctx.fingerprint.id,
        registry_hit=hit.id if hit is not None else None, weights_layout=planned.form,
        weights_layout_choice=planned.choice, tasks=len(planned.tasks),
        budget_trials=planned.budget.max_trials_global, budget_per_task=planned.budget.max_trials_per_task,
        trial_plan=reused.trial_plan if reused is not None else None,
        reuse=reused.plan if reused is not None else None,
        trials=reused.plan.trials if reused is not None else planned.budget.max_trials_global,
        trials_per_second=measured_trial_rate(ctx.store, ctx.fingerprint.id),
    )


def _stored_library(ctx: FarmContext, key, request: "SubmitRequest"):
    """The artifact a submit would answer with, looked up read-only as `farm.load` looks (the submit
    itself also checks its bytes); None if it would tune."""
    from foundation.domain.weights_layout import AUTO
    from foundation.job_driver.hits import library_scopes

    stored = ctx.store.find_model(key.name, key.batch, key.source_digest)
    if stored is None:
        return None
    form = None if request.weights_layout == AUTO else request.weights_layout
    for scope in library_scopes(ctx.store, ctx.target_json, ctx.fingerprint.id, ctx.fingerprint.details,
                                chosen=request.fingerprint):
        artifact = ctx.store.find_artifact(stored.id, scope.target_json, scope.fingerprint_id, ctx.tvm_version, form)
        if artifact is not None:
            return artifact
    return None


def _empty_context(target: str) -> FarmContext:
    """No registry yet: a first submit's plan, against an empty registry that lives in memory only
    (nothing is created where the real one would be)."""
    from foundation.hardware.targets import target_json
    from foundation.hardware.versions import tvm_version
    from foundation.registry.store import RegistryStore

    fingerprint, canonical = local_target(target, tuning_here=True)
    return FarmContext(RegistryStore("sqlite://", create=True), fingerprint, canonical, target_json(canonical),
                       tvm_version())


def measured_trial_rate(store: "RegistryStore", fingerprint_id: str) -> float | None:
    """Trials per second of this fingerprint's newest finished jobs that tuned, or None without one."""
    trials, seconds = 0, 0.0
    for job in store.list_jobs(limit=RATE_JOBS * 5, states=FINAL_STATES):
        if job.fingerprint_id != fingerprint_id or job.cache_hit or job.trials_done <= 0:
            continue
        if job.started_at is None or job.finished_at is None:
            continue
        trials += job.trials_done
        seconds += max((job.finished_at - job.started_at).total_seconds(), 0.0)
    return round(trials / seconds, 3) if trials and seconds > 0 else None
