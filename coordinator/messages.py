"""The coordinator's values as proto messages: jobs, their events, agents, tensors.

Pure conversions with no decisions, used by the gRPC face (coordinator.servicer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

import numpy as np
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator import metrics
from coordinator.values import AgentView, JobView
from foundation.domain.job_spec import DISTRIBUTED, job_options
from foundation.domain.jobs import JobState
from foundation.domain.rounds_outcome import RoundsOutcome
from foundation.domain.shards import ShardState
from foundation.domain.trial_plan import PlannedTrials, TrialPlan
from foundation.domain.warm_start_use import WarmStartUse, job_warm_start
from foundation.wire import farm_pb2

JOB_STATES = {state: getattr(farm_pb2, f"JOB_STATE_{state.name}") for state in JobState}
JOB_STATES_BACK = {v: k for k, v in JOB_STATES.items()}
_SHARD_STATES = {state: getattr(farm_pb2, f"SHARD_STATE_{state.name}") for state in ShardState}


def timestamp(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def duration(seconds: float) -> Duration:
    duration = Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


def job_message(view: JobView) -> farm_pb2.Job:
    job = view.job
    stored = job_options(job)
    notes = stored.notes
    message = farm_pb2.Job(
        id=job.id,
        state=JOB_STATES[job.state],
        status=job.status or "",
        target=job.target or "",
        target_kind=job.target_kind or "",
        weights_layout=notes.weights_layout.value,
        weights_layout_why=notes.weights_layout_choice.why if notes.weights_layout_choice else "",
        fingerprint_id=job.fingerprint_id or "",
        cache_hit=job.cache_hit,
        trials_done=job.trials_done,
        trials_budget=job.trials_budget,
        trial_errors=view.trial_errors,
        shards=farm_pb2.ShardCounts(**{s.value: n for s, n in view.shard_counts.items()}),
        error=job.error or "",
    )
    built_untuned = notes.built_untuned  # foundation.job_driver.built_untuned
    if built_untuned:
        message.built_untuned.extend(built_untuned.tasks)
        message.tasks_built = built_untuned.of
    if view.model is not None:
        message.model.CopyFrom(farm_pb2.ModelSummary(
            name=view.model.name, source=view.model.source, source_digest=view.model.source_digest,
            batch=view.model.batch))
    for shard in view.failed_shards:
        message.failed_shards.append(farm_pb2.ShardFailure(
            shard_id=shard.id, task_names=shard.task_names,
            attempts=[farm_pb2.AttemptFailure(attempt=f.attempt, agent_id=f.agent_id or "", reason=f.reason)
                      for f in shard.failures]))
    if view.artifact is not None:
        a = view.artifact
        validation = a.validation or {}
        message.artifact.CopyFrom(farm_pb2.ArtifactSummary(
            id=a.id, sha256=a.sha256, size_bytes=a.size,
            latency=farm_pb2.LatencyStats(mean_ms=a.latency_mean_ms, median_ms=a.latency_median_ms,
                                          std_ms=a.latency_std_ms),
            untuned_latency=farm_pb2.LatencyStats(mean_ms=a.untuned_latency_mean_ms or 0.0),
            validated=bool(validation.get("passed"))))
        speed = a.speed
        if speed:
            message.artifact.speed.CopyFrom(farm_pb2.UntunedSpeed(
                tuned_median_ms=speed["tuned_median_ms"], untuned_median_ms=speed["untuned_median_ms"],
                ratio=speed["ratio"], slower_than_untuned=speed["slower_than_untuned"],
                kept_untuned=speed["kept_untuned"], runs=speed["runs"], untuned_runs=speed["untuned_runs"]))
    for name, moment in (("created_at", job.created_at), ("started_at", job.started_at),
                         ("finished_at", job.finished_at)):
        if moment is not None:
            getattr(message, name).CopyFrom(timestamp(moment))
    reused = notes.reused
    if reused:
        message.reuse.CopyFrom(farm_pb2.JobReuse(
            mode=reused.mode.value, tasks=reused.tasks, skipped=reused.skipped, topped_up=reused.topped_up,
            topup_trials=reused.topup_trials, planned_trials=reused.planned_trials, trials=reused.trials))
    warm = job_warm_start(notes.warm_start_used)
    if warm:
        # cost_model_start is the embedded summary's words, not on the wire: agents say their
        # model by its kind, sha256 and note, which JobWarmStart carries.
        warm.pop("cost_model_start", None)
        message.warm_start.CopyFrom(farm_pb2.JobWarmStart(**warm))
    if notes.trial_plan is not None:
        message.trial_plan.extend(_planned_trials(line) for line in notes.trial_plan.tasks)
        message.trial_plan_budget.CopyFrom(_trial_plan_budget(notes.trial_plan))
    if notes.until is not None:
        message.until.CopyFrom(_until_message(notes.until))
    elif stored.spec.until and stored.spec.mode == DISTRIBUTED:  # before its first round: only the goal
        goal = stored.spec.until.goal
        message.until.CopyFrom(farm_pb2.JobUntil(goal=goal.describe(), goal_ms=goal.latency_ms or 0.0))
    return message


def _planned_trials(line: PlannedTrials) -> farm_pb2.PlannedTrials:
    """One task's line of a trial plan, its figures rounded as PlannedTrials.to_json stores them."""
    stored = line.to_json()
    return farm_pb2.PlannedTrials(task=stored.pop("task"), **stored)


def _trial_plan_budget(plan: TrialPlan) -> farm_pb2.TrialPlanBudget:
    """What a trial plan split and how, beside its tasks' lines."""
    message = farm_pb2.TrialPlanBudget(budget=plan.budget, per_task_cap=plan.per_task_cap, phases=plan.phases)
    if plan.peak_gflops is not None:
        message.peak_gflops = plan.peak_gflops
    return message


def _until_message(until: RoundsOutcome) -> farm_pb2.JobUntil:
    """A job's rounds on the wire (those its plans hold, as RoundsOutcome.to_json stores them)."""
    rounds = [
        farm_pb2.TunedRound(
            trials=r.trials, median_ms=r.timing.candidate_ms, upper_quartile_ms=r.timing.candidate_upper_ms,
            goal_ms=r.timing.goal_ms, blocks=r.timing.blocks,
            blocks_won=-1 if r.timing.blocks_won is None else r.timing.blocks_won,
            beats=r.timing.beats, estimated_ms=r.estimated_ms or 0.0)
        for r in until.rounds[:len(until.planned)]
    ]
    message = farm_pb2.JobUntil(goal=until.goal.describe(), goal_ms=until.goal_ms, stopped=until.ending or "",
                                summary=until.summary(), rounds=rounds,
                                planned=[farm_pb2.RoundPlan(trials=trials) for trials in until.planned])
    reference = until.reference
    if reference is not None:
        message.reference_latency.CopyFrom(farm_pb2.LatencyStats(
            mean_ms=reference.mean_ms, median_ms=reference.median_ms, std_ms=reference.std_ms,
            runs=reference.runs, warmup=reference.warmup))
    check = until.reference_check
    if check is not None:
        message.reference_check.CopyFrom(farm_pb2.ReferenceCheck(
            passed=check.passed, max_abs_err=check.max_abs_err, rtol=check.rtol, atol_scale=check.atol_scale,
            detail=check.detail))
    return message


def event_message(event, state_of: Callable[[str], int]) -> farm_pb2.JobEvent:
    """A stored job event on the wire; ``state_of`` maps a stored state name to the enum."""
    message = farm_pb2.JobEvent(job_id=event.job_id, sequence=event.sequence, time=timestamp(event.created_at))
    p = event.payload
    if event.kind == "state_changed":
        message.state_changed.CopyFrom(farm_pb2.JobStateChanged(
            from_state=state_of(p.get("from", "")), to_state=state_of(p.get("to", "")),
            status=p.get("status", ""), error=p.get("error", "") or ""))
    elif event.kind == "shard_changed":
        message.shard_changed.CopyFrom(farm_pb2.ShardChanged(
            shard_id=p.get("shard_id", ""), state=_SHARD_STATES.get(ShardState(p["state"]), 0) if p.get("state") else 0,
            attempt=int(p.get("attempt", 0)), agent_id=p.get("agent_id", ""), reason=p.get("reason", "")))
    elif event.kind == "task_progress":
        fields = {k: p[k] for k in ("shard_id", "task_name", "trials", "budget", "build_errors", "run_errors",
                                    "best_us", "best_gflops") if k in p}
        message.task_progress.CopyFrom(farm_pb2.TaskProgress(**fields))
    else:
        message.log.CopyFrom(farm_pb2.LogLine(source=p.get("source", "coordinator"), level=p.get("level", "info"),
                                              message=p.get("message", json.dumps(p))))
    return message


def state_enum(name: str) -> int:
    try:
        return JOB_STATES[JobState(name)]
    except ValueError:
        return farm_pb2.JOB_STATE_UNSPECIFIED


def agent_message(view: AgentView) -> farm_pb2.Agent:
    agent = view.agent
    if agent.state == "lost":
        state = farm_pb2.AGENT_STATE_LOST
    else:
        state = farm_pb2.AGENT_STATE_BUSY if view.running_leases else farm_pb2.AGENT_STATE_IDLE
    return farm_pb2.Agent(
        id=agent.id, fingerprint_id=agent.fingerprint_id, fingerprint_summary=view.fingerprint_summary,
        target_kinds=agent.target_kinds, address=agent.address, hostname=agent.hostname,
        tvm_version=agent.tvm_version, state=state, registered_at=timestamp(agent.registered_at),
        last_heartbeat=timestamp(agent.last_heartbeat_at),
        running_leases=[farm_pb2.LeaseRef(job_id=j, shard_id=s, attempt=a) for j, s, a in view.running_leases],
        rpc_server_serving=view.rpc_server_serving, trials_per_second=metrics.trials_per_second(agent.id),
    )


def tensor_spec(spec: dict) -> farm_pb2.TensorSpec:
    return farm_pb2.TensorSpec(name=spec["name"], dtype=spec["dtype"], shape=[int(d) for d in spec["shape"]],
                               fill_json=json.dumps(spec["fill"]) if spec.get("fill") else "")


def tensor(spec: farm_pb2.TensorSpec, value) -> farm_pb2.Tensor:
    array = np.ascontiguousarray(value, dtype=np.dtype(spec.dtype))
    return farm_pb2.Tensor(spec=spec, data=array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


_SEED_SOURCES = {True: farm_pb2.SEED_SOURCE_OWN_FINGERPRINT, False: farm_pb2.SEED_SOURCE_OTHER_FINGERPRINT}


def seed_message(seed) -> farm_pb2.Seed:
    """A donor schedule (foundation.meta_schedule.warm.SeedTrace) on the wire."""
    return farm_pb2.Seed(workload_json=seed.workload_json, trace_json=seed.trace_json,
                         fingerprint_id=seed.fingerprint_id, source=_SEED_SOURCES[seed.own],
                         mean_sec=seed.mean_sec, record_id=seed.record_id)


def cost_model_ref(model) -> farm_pb2.CostModelRef:
    """A stored cost model (foundation.registry.cost_models.StoredCostModel), named, not sent."""
    return farm_pb2.CostModelRef(id=model.id, kind=model.kind, sha256=model.sha256, size_bytes=model.size,
                                 samples=model.samples, fingerprint_id=model.fingerprint_id,
                                 tvm_version=model.tvm_version)


def warm_start_use(use: farm_pb2.WarmStartUse) -> WarmStartUse:
    """An agent's WarmStartUse as the job keeps it."""
    model = use.cost_model if use.HasField("cost_model") else None
    if model is None:
        return WarmStartUse(use.seeds_offered, use.seeds_own_fingerprint, use.seeds_other_fingerprints,
                            use.seeds_rejected, use.seeds_failed, "", use.cost_model_note, cost_model_kind="")
    return WarmStartUse(use.seeds_offered, use.seeds_own_fingerprint, use.seeds_other_fingerprints,
                        use.seeds_rejected, use.seeds_failed, model.sha256, use.cost_model_note,
                        cost_model_kind=model.kind, cost_model_id=model.id)
