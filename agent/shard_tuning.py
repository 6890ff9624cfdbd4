"""What an agent does with a lease: tune a shard's tasks, or validate and time a library."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Protocol

import numpy as np

from agent import metrics
from agent.coordinator_calls import lease_of, retry_unavailable
from agent.cost_models import CostModelCache
from agent.state.events import Event, ReportAccepted, ReportRefused, ShardFailed, ShardStopped, ShardTuned
from foundation.meta_schedule.progress import ProgressListener

logger = logging.getLogger("farm.agent")


class LeaseHolder(Protocol):
    """What tuning a shard or validating a library needs of the agent that holds the lease."""

    agent_id: str
    stub: object  # farm_pb2_grpc.FarmAgentStub
    settings: object  # agent.daemon.AgentSettings
    cost_models: CostModelCache
    fingerprint: object  # foundation.hardware.fingerprint.Fingerprint: its device features read a cross model
    explain_tls: object  # agent.coordinator_calls.ExplainTls: a failed handshake in words

    def pools_for(self): ...

    def post(self, event: Event) -> None:
        """Hand the agent's state machine what happened (here: a report's answer)."""


class _ShardProgress(ProgressListener):
    """Keeps the latest per-task progress, sent along with each batch of records."""

    def __init__(self):
        self.tasks = []

    def started(self, tasks):
        self.tasks = list(tasks)

    def measured(self, task, new_trials):
        pass

    def finished(self, tasks):
        pass

    def to_proto(self, shard_id: str):
        from foundation.wire import farm_pb2

        return [
            farm_pb2.TaskProgress(
                shard_id=shard_id, task_name=t.name, trials=t.trials, budget=t.budget,
                build_errors=t.build_errors, run_errors=t.run_errors,
                best_us=(t.best_sec or 0.0) * 1e6, best_gflops=t.best_gflops or 0.0,
            )
            for t in self.tasks
        ]


def report_records(agent: LeaseHolder, shard, batch, progress, batching, stop: threading.Event) -> None:
    """Send ``batch`` ((workload shash, TuningRecord JSON, timing context) triples) measured under ``shard``'s lease,
    with the tasks' ``progress``; retried while the coordinator is away, until ``stop`` is set.

    The answer goes to the agent (``post``); records the coordinator refused (a trace that does
    not replay on its task, times no kernel takes) are counted and said in one warning line: the
    rest of the report was kept, and the shard tunes on.
    """
    from foundation.wire import farm_pb2

    records = [farm_pb2.MeasuredRecord(workload_shash=shash, tuning_record_json=record_json, timing_context=context)
               for shash, record_json, context in batch]
    request = farm_pb2.ReportRecordsRequest(agent_id=agent.agent_id, shard_id=shard.shard_id,
                                            attempt=shard.attempt, records=records, progress=progress)
    reply = retry_unavailable(lambda: agent.stub.ReportRecords(request, timeout=30), stop,
                              "report records", patience=agent.settings.report_patience_sec,
                              explain_tls=agent.explain_tls)
    if reply is None:
        return
    if not reply.accepted:
        agent.post(ReportRefused(lease_of(shard), reply.reason))
        return
    batching.follow(reply.records_per_report, reply.report_within.ToTimedelta().total_seconds())
    if reply.refused:
        metrics.REPORTED_RECORDS_REFUSED.labels(agent.fingerprint.id).inc(reply.refused)
        logger.warning("%s: the coordinator refused %d of the %d record(s) reported; the first: %s",
                       shard.shard_id, reply.refused, len(records), reply.refused_reason)
    agent.post(ReportAccepted(time.monotonic()))


def tune_shard(agent: LeaseHolder, shard, cancelled: threading.Event) -> ShardTuned | ShardFailed | ShardStopped:
    """Tune every task of ``shard``; records stream to the coordinator as they are measured.

    Ends when the tuning does, or soon after ``cancelled`` is set; says how it ended. Each
    report's answer goes to the agent (``post``): a refused one means the shard is another
    attempt's now, and the agent's state machine cancels this one.
    """
    from foundation import config
    from foundation.compile import TuningTask
    from foundation.hardware.targets import to_tvm_target
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
    from foundation.meta_schedule.database.shard_database import ReportBatching, shard_database
    from foundation.meta_schedule.tuner import TuningBudget, tune

    target_doc = json.loads(shard.target)
    install_lean_tensor_intrinsics(target_doc["kind"])
    import tvm

    progress = _ShardProgress()
    stop_reporting = threading.Event()
    batching = ReportBatching()
    batching.follow(shard.records_per_report, shard.report_within.ToTimedelta().total_seconds())

    def report(batch):
        report_records(agent, shard, batch, progress.to_proto(shard.shard_id), batching, stop_reporting)

    lease = lease_of(shard)
    database = None
    try:
        target = to_tvm_target(target_doc)
        tasks = [
            TuningTask(name=t.name, weight=int(t.weight), mod=tvm.ir.load_json(t.mod_json), flop=t.flop)
            for t in shard.tasks
        ]
        database = shard_database(
            [(t.workload_shash, task.mod) for t, task in zip(shard.tasks, tasks)],
            [(w.workload_shash, w.tuning_record_json) for w in shard.warm_records],
            report,
            batching,
        )
        b = shard.budget
        budget = TuningBudget(b.max_trials_global, b.max_trials_per_task, b.num_trials_per_iter or 16)
        work_dir = (agent.settings.work_dir or config.data_dir() / "agent") / shard.shard_id.replace("/", "_")
        logger.info("tuning %s (attempt %d): %d tasks, %d trials, %d warm records", shard.shard_id,
                    shard.attempt, len(tasks), budget.max_trials_global, len(shard.warm_records))
        # Each task's trials in the job's trial plan, or a reused task's top-up (the coordinator
        # skips what the registry already answers, and tasks planned no trial).
        caps = [t.max_trials or None for t in shard.tasks]
        warm, model_used = _warm_start(agent, shard)
        result = tune(tasks, target, database, budget, work_dir, pools=agent.pools_for(),
                      listener=progress, cancelled=cancelled, seed=int(shard.seed) or None, trial_caps=caps,
                      warm=warm)
        database.flush()
    except Exception as err:
        stop_reporting.set()  # a report in flight stops retrying
        if database is not None:
            database.close()
        if cancelled.is_set():
            return ShardStopped(lease)
        reason = f"{type(err).__name__}: {err}"[:2000]
        logger.warning("%s failed: %s", shard.shard_id, reason)
        return ShardFailed(lease, reason, tuple(_summaries(progress.tasks)))
    database.close()
    if cancelled.is_set() or result.cancelled:
        logger.info("%s stopped (cancelled)", lease.shard_id)
        return ShardStopped(lease)
    return ShardTuned(lease, tuple(_summaries(result.tasks)), result.trials, result.seconds,
                      _warm_start_use(shard, result.seeds, model_used, warm))


def _warm_start(agent: LeaseHolder, shard):
    """What the shard's search starts from (foundation.meta_schedule.warm.WarmStart, or None), as the
    embedded mode's does: the shard's seeds, measured first, and the cost model it names, fetched
    and checked (agent.cost_models); and the model's ref and why none, for the report."""
    from foundation.meta_schedule.warm import WarmStart
    from foundation.meta_schedule.warm.seed_sources import SeedTrace
    from foundation.wire import farm_pb2

    seeds = [[SeedTrace(s.workload_json, s.trace_json, s.fingerprint_id,
                        s.source == farm_pb2.SEED_SOURCE_OWN_FINGERPRINT, s.mean_sec, s.record_id)
              for s in task.seeds] for task in shard.tasks]
    model, used = None, (None, "")
    if shard.HasField("cost_model"):
        fetched = agent.cost_models.get(agent.stub, agent.agent_id, shard.cost_model)
        used = (None, fetched.note)
        if fetched.content is not None:
            try:
                model = _cost_model(shard.cost_model, fetched.content, agent.fingerprint)
                used = (shard.cost_model, "")
            except (ValueError, KeyError, OSError) as err:  # a format this agent does not read
                used = (None, f"cost model {shard.cost_model.id} could not be read: {err}")
                logger.warning("%s; the search starts untrained", used[1])
    if not any(seeds) and model is None:
        return None, used
    logger.info("%s starts warm: %d seeds offered, cost model %s", shard.shard_id, sum(map(len, seeds)),
                f"{shard.cost_model.kind} {shard.cost_model.sha256[:12]} ({shard.cost_model.samples} samples)"
                if model is not None else "untrained")
    return WarmStart(seeds=seeds, cost_model=model, max_seeds_per_task=shard.max_seeds_per_task), used


def _cost_model(ref, content: bytes, fingerprint):
    """The search's cost model from the named model's bytes: the fingerprint's own (xgb), or the
    one trained across fingerprints (xgb-cross), read with this box's device features."""
    from foundation.meta_schedule.warm.cost_models import model_from_bytes
    from foundation.meta_schedule.warm.cross_model import KIND as CROSS_KIND

    if ref.kind != CROSS_KIND:
        return model_from_bytes(content)
    from foundation.hardware.device_features import device_vector
    from foundation.meta_schedule.warm.cross_cost_model import CrossCostModel, describe_cross
    from foundation.meta_schedule.warm.cross_model import model_from_bytes as cross_model_from_bytes

    return CrossCostModel(cross_model_from_bytes(content), device_vector(fingerprint.details),
                          started_from=describe_cross(ref))


def _warm_start_use(shard, seeds, model_used, warm=None):
    """What CompleteShard reports of the warm start (seeds: the tuner's SeedRoundReport, or None;
    a cross model's note says it was the one and that the search asked it)."""
    from foundation.meta_schedule.warm.job_start import cost_model_note
    from foundation.wire import farm_pb2

    ref, note = model_used
    note = cost_model_note(warm) or note
    use = farm_pb2.WarmStartUse(
        seeds_offered=sum(len(t.seeds) for t in shard.tasks),
        seeds_own_fingerprint=seeds.own_fingerprint if seeds else 0,
        seeds_other_fingerprints=seeds.other_fingerprints if seeds else 0,
        seeds_rejected=seeds.rejected if seeds else 0,
        seeds_failed=seeds.failed if seeds else 0,
        cost_model_note=note[:2000],  # the coordinator takes notes of up to 4,096 characters
    )
    if ref is not None:
        use.cost_model.CopyFrom(ref)
    return use


def _summaries(tasks):
    from foundation.wire import farm_pb2

    return [
        farm_pb2.TaskSummary(
            task_name=t.name, trials=t.trials, build_errors=t.build_errors, run_errors=t.run_errors,
            best_us=(t.best_sec or 0.0) * 1e6, elapsed_s=t.elapsed, sample_errors=list(t.errors),
        )
        for t in tasks
    ]


def validate_library(agent: LeaseHolder, lease, stop: threading.Event) -> None:
    """Run the tuned library against its reference on this device, time it, report."""
    from foundation.models.loaded import Fill, TensorSpec, random_inputs, random_weights
    from foundation.runtime.validation import check_library
    from foundation.wire import farm_pb2

    def spec(s) -> TensorSpec:
        fill = Fill.from_json(json.loads(s.fill_json)) if s.fill_json else None
        return TensorSpec(s.name, tuple(int(d) for d in s.shape), s.dtype, fill)

    def array(t) -> np.ndarray:
        return np.frombuffer(t.data, dtype=t.spec.dtype).reshape(tuple(t.spec.shape)).copy()

    request = farm_pb2.ReportValidationRequest(
        agent_id=agent.agent_id, validation_id=lease.validation_id, attempt=lease.attempt)
    begin = time.monotonic()
    try:
        kind = json.loads(lease.target)["kind"]
        inputs = random_inputs([spec(s) for s in lease.inputs], int(lease.seed))
        weights = ([array(w) for w in lease.weights] if lease.weights
                   else random_weights([spec(s) for s in lease.weight_specs], int(lease.seed)))
        reference = lease.WhichOneof("reference")
        check = check_library(
            lease.library,
            lease.reference_library if reference == "reference_library" else None,
            kind, inputs, weights,
            reference_outputs=[array(t) for t in lease.reference_outputs.outputs]
            if reference == "reference_outputs" else None,
            runs=lease.runs or 20, warmup=lease.warmup or 3,
        )
        v = check.validation
        request.check.CopyFrom(farm_pb2.OutputCheck(
            passed=v.passed, max_abs_err=v.max_abs_err, max_rel_err=v.max_rel_err,
            rtol=v.rtol, atol=v.atol, reason=v.reason or ""))
        request.latency.CopyFrom(_latency(check.latency))
        if check.untuned_latency is not None:
            request.untuned_latency.CopyFrom(_latency(check.untuned_latency))
    except Exception as err:
        request.error = f"{type(err).__name__}: {err}"[:2000]
    # Retried while the coordinator restarts: a lost report is never noticed, since this agent
    # keeps heartbeating and so the lease never expires (its job would wait forever).
    reply = retry_unavailable(lambda: agent.stub.ReportValidation(request, timeout=60), stop,
                               "report validation", patience=agent.settings.report_patience_sec,
                               explain_tls=agent.explain_tls)
    if reply is not None:
        logger.info("validated %s in %.1f s%s", lease.job_id, time.monotonic() - begin,
                    "" if reply.accepted else f" (not accepted: {reply.reason})")


def _latency(latency):
    from foundation.wire import farm_pb2

    return farm_pb2.LatencyStats(mean_ms=latency.mean_ms, median_ms=latency.median_ms,
                                 std_ms=latency.std_ms, runs=latency.runs, warmup=latency.warmup)
