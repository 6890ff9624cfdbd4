"""The coordinator's agent-facing calls: registration, heartbeats, shard and validation leases, reports."""

from __future__ import annotations

from datetime import datetime

import json
from typing import Sequence

from coordinator.calls import (
    AgentRefused,
    CancelLease,
    InvalidRequest,
    LeaseRef,
    OfferedTask,
    Registration,
    ReRegister,
    ShardOffer,
    ShardOutcome,
    ValidationOffer,
    ValidationReport,
    job_of_validation,
    rpc_key,
    utc_now,
    validation_id,
)
from coordinator.jobs import JobState
from coordinator.registry.cluster_store import VALIDATION_LEASED
from coordinator.registry.entities import RecordReport
from farm.errors import NotFound


class AgentCalls:
    """Calls from agents (over FarmAgent): a part of the Coordinator (coordinator.service),
    whose state it shares. A reported validation is settled by Housekeeping."""

    def register_agent(self, *, fingerprint_id: str, fingerprint_summary: str, fingerprint_json: str,
                       target_kinds: Sequence[str], hostname: str, tvm_version: str, address: str,
                       build_workers: int = 0, previous_agent_id: str = "") -> Registration:
        from farm.targets import FINGERPRINT_KIND, TUNABLE_KINDS

        if not fingerprint_id:
            raise InvalidRequest("the registration names no fingerprint", "send the box's fingerprint id")
        unknown = sorted(set(target_kinds) - set(TUNABLE_KINDS))
        if not target_kinds or unknown:
            raise InvalidRequest(f"target kinds {list(target_kinds)} are not all tunable",
                                 f"use some of {', '.join(TUNABLE_KINDS)}")
        if tvm_version != self.tvm_version:
            raise AgentRefused(
                f"agent on {hostname or address} runs TVM {tvm_version}, the coordinator {self.tvm_version}; "
                "records are only comparable within one TVM version",
                f"install apache-tvm=={self.tvm_version} on the agent",
            )
        try:
            described = json.loads(fingerprint_json) if fingerprint_json else {}
        except json.JSONDecodeError:
            raise InvalidRequest("fingerprint_json is not JSON", "send agent.fingerprint's to_json()") from None
        kind = described.get("kind") or FINGERPRINT_KIND[sorted(target_kinds)[0]]
        self.store.upsert_fingerprint(fingerprint_id, kind, fingerprint_summary or described.get("summary", ""),
                                      described.get("details", {}))
        agent = self.cluster.register_agent(
            fingerprint_id=fingerprint_id, target_kinds=list(target_kinds), hostname=hostname, address=address,
            tvm_version=tvm_version, rpc_key=rpc_key(fingerprint_id),
            details={"build_workers": build_workers}, now=utc_now(), previous_agent_id=previous_agent_id or None,
        )
        self.wake.set()  # jobs waiting for this kind of agent can be bound now
        return Registration(agent, self.settings.heartbeat_interval, self.settings.lease_ttl,
                            self.tracker_host, self.tracker_port, agent.rpc_key)

    def heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool = False,
                  sent_at: datetime | None = None) -> list[CancelLease | ReRegister]:
        """Note the agent alive; say which of its leases to stop, or that it must register.

        ``sent_at`` is when the agent listed its leases: a lease is only "lost" if it was
        granted well before that, not merely before this (possibly late) handling.
        """
        now = utc_now()
        if self.cluster.heartbeat(agent_id, now) is None:
            return [ReRegister(f"agent {agent_id} is unknown to this coordinator; register again")]
        self._rpc_serving[agent_id] = rpc_server_serving
        shards = [r for r in running if job_of_validation(r.shard_id) is None]
        verdict = self.cluster.reconcile_leases(
            agent_id, [(r.shard_id, r.attempt) for r in shards], now,
            grace=2 * self.settings.heartbeat_interval, max_attempts=self.settings.max_attempts,
            as_of=min(sent_at, now) if sent_at is not None else now,
        )
        job_of = {r.shard_id: r.job_id for r in shards}
        instructions: list[CancelLease | ReRegister] = []
        for shard_id, attempt, reason in verdict.cancel:
            job_id = job_of[shard_id]
            instructions.append(CancelLease(LeaseRef(job_id, shard_id, attempt), self._why_stop(job_id, reason)))
        for ref in running:
            job_id = job_of_validation(ref.shard_id)
            if job_id is None:
                continue
            validation = self.cluster.get_validation(job_id)
            if (validation is None or validation.attempt != ref.attempt
                    or validation.state != VALIDATION_LEASED or validation.agent_id != agent_id):
                instructions.append(CancelLease(
                    LeaseRef(job_id, ref.shard_id, ref.attempt),
                    self._why_stop(job_id, f"validation attempt {ref.attempt} of {job_id} is no longer current")))
        return instructions

    def _why_stop(self, job_id: str, reason: str) -> str:
        try:
            job = self.store.get_job(job_id)
        except NotFound:
            return reason
        if job.state == JobState.CANCELLED.value:
            return f"job {job_id} was cancelled ({job.error or 'no reason given'})"
        if job.state == JobState.FAILED.value:
            return f"job {job_id} failed: {(job.error or '')[:300]}"
        return reason

    def lease_shard(self, agent_id: str, fingerprint_id: str, target_kinds: Sequence[str]) -> ShardOffer | None:
        if self.draining:
            return None
        lease = self.cluster.claim_shard(agent_id, fingerprint_id, target_kinds, utc_now(), self.settings.lease_ttl)
        if lease is None:
            return None
        job = lease.job
        per_task = max((t.trials_budget for t in lease.tasks), default=1)
        per_task = max(1, min(per_task, lease.shard.trials_budget))
        warm = []
        for task in lease.tasks:
            for record in self.store.top_k_records(task.workload_id, job.fingerprint_id, job.target,
                                                   self.tvm_version, self.settings.warm_records_per_task):
                warm.append((task.workload_shash, _record_json(record)))
        return ShardOffer(
            lease=lease,
            tasks=[OfferedTask(t.name, t.weight, t.flop, self._module_json_of(t.workload_id, t.mod_json),
                               t.workload_shash) for t in lease.tasks],
            target=job.target,
            max_trials_global=lease.shard.trials_budget,
            max_trials_per_task=per_task,
            num_trials_per_iter=max(1, min(16, per_task)),
            tracker_host=self.tracker_host,
            tracker_port=self.tracker_port,
            tracker_key=rpc_key(job.fingerprint_id or fingerprint_id),
            seed=int(job.options.get("seed") or 0),
            records_per_report=self.settings.records_per_report,
            warm_records=warm,
        )

    def _module_json_of(self, workload_id: int, stored_json: str) -> str:
        from coordinator.registry.tvm_database import module_json

        with self._lock:
            cached = self._module_json.get(workload_id)
        if cached is None:
            cached = module_json(stored_json)
            with self._lock:
                self._module_json[workload_id] = cached
        return cached

    def report_records(self, agent_id: str, shard_id: str, attempt: int,
                       records: Sequence[tuple[str, str]], progress: Sequence[dict]) -> RecordReport:
        """Keep a batch of (workload shash, TuningRecord JSON) measured under a lease.

        Every reported candidate counts as a trial, even one without a record to keep
        (failures are data); a stale attempt keeps nothing.
        """
        from coordinator.registry.tvm_database import new_record_from
        from coordinator.shards import stale_reason

        shard = self.cluster.get_shard(shard_id)
        if shard is None:
            return RecordReport(False, f"shard {shard_id} is unknown", 0, 0)
        # Checked before parsing, so a stale agent costs nothing; the store checks again.
        stale = stale_reason(shard.as_shard(), attempt, agent_id)
        if stale is not None:
            return RecordReport(False, stale, 0, 0)
        job = self.store.get_job(shard.job_id)
        workloads = {t.workload_shash: t.workload_id for t in self.cluster.job_tasks(job.id)}
        agent = self.cluster.get_agent(agent_id)
        software = {"tvm": agent.tvm_version} if agent else {}
        new, dropped = [], []
        for shash, record_json in records:
            if not record_json:
                continue
            workload_id = workloads.get(shash)
            if workload_id is None:
                dropped.append(f"workload {shash} is not one of job {job.id}'s tasks")
                continue
            try:
                new.append(new_record_from(
                    json.loads(record_json), workload_id=workload_id, fingerprint_id=job.fingerprint_id,
                    target_json=job.target, tvm_version=self.tvm_version, software=software, job_id=job.id))
            except ValueError as err:
                dropped.append(f"unreadable record: {err}")
        result = self.cluster.report_records(shard_id, attempt, agent_id, new, trials_done_delta=len(records))
        if not result.accepted:
            return result
        now = utc_now()
        for item in progress:
            self.cluster.append_event(job.id, "task_progress", dict(item, shard_id=shard_id), now)
            with self._lock:
                self._progress.setdefault(job.id, {})[(shard_id, item["task_name"])] = dict(item)
        if dropped:
            self.cluster.append_event(job.id, "log", {
                "source": agent_id, "level": "warning",
                "message": f"{len(dropped)} reported record(s) were not kept: {dropped[0]}"}, now)
        return result

    def complete_shard(self, agent_id: str, shard_id: str, attempt: int,
                       summaries: Sequence[dict] = ()) -> ShardOutcome:
        if self.cluster.get_shard(shard_id) is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        change = self.cluster.complete_shard(shard_id, attempt, agent_id, utc_now())
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
            self.wake.set()
        return ShardOutcome(change.accepted, change.reason or "", change.shard.state)

    def fail_shard(self, agent_id: str, shard_id: str, attempt: int, reason: str,
                   summaries: Sequence[dict] = ()) -> ShardOutcome:
        if self.cluster.get_shard(shard_id) is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        reason = reason or "the agent gave no reason"
        change = self.cluster.fail_shard(shard_id, attempt, agent_id, reason, utc_now(),
                                         self.settings.max_attempts)
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
        return ShardOutcome(change.accepted, change.reason or "", change.shard.state)

    def _log_task_errors(self, job_id: str, agent_id: str, shard_id: str, summaries: Sequence[dict]) -> None:
        """Measurement errors are data: each task's count and a sample go into the job's log."""
        for task in summaries:
            errors = int(task.get("build_errors", 0)) + int(task.get("run_errors", 0))
            if not errors:
                continue
            samples = "; ".join(task.get("sample_errors", [])[:3])
            self.cluster.append_event(job_id, "log", {
                "source": agent_id, "level": "warning",
                "message": (f"{shard_id} task {task.get('task_name')}: {errors} of {task.get('trials', 0)} "
                            f"candidates failed ({task.get('build_errors', 0)} build, "
                            f"{task.get('run_errors', 0)} run)" + (f": {samples}" if samples else "")),
            }, utc_now())

    def lease_validation(self, agent_id: str, fingerprint_id: str) -> ValidationOffer | None:
        if self.draining:
            return None
        lease = self.cluster.claim_validation(agent_id, fingerprint_id, utc_now())
        if lease is None:
            return None
        weights = []
        model = self.store.get_model(lease.job.model_id)
        if model is not None and model.source == "onnx":
            weights = list(self._models.get(model).make_weights(lease.validation.seed))
        return ValidationOffer(lease, validation_id(lease.job.id), weights)

    def report_validation(self, agent_id: str, validation: str, attempt: int,
                          report: ValidationReport) -> ShardOutcome:
        job_id = job_of_validation(validation)
        if job_id is None or self.cluster.get_validation(job_id) is None:
            return ShardOutcome(False, f"validation {validation} is unknown")
        now = utc_now()
        if report.error or report.check is None or report.latency is None:
            change = self.cluster.fail_validation(
                job_id, attempt, agent_id, report.error or "the agent reported no outcome", now,
                self.settings.max_attempts)
        else:
            result = {
                "agent_id": agent_id,
                "validation": report.check.to_json(),
                "latency": _latency_json(report.latency),
                "untuned_latency": _latency_json(report.untuned_latency) if report.untuned_latency else None,
            }
            change = self.cluster.finish_validation(job_id, attempt, agent_id, result, now)
        if change.accepted:
            self._settle_validation(job_id)
        return ShardOutcome(change.accepted, change.reason or "")


def _record_json(record) -> str:
    """A stored record as TuningRecord.as_json() text, as agents read it."""
    return json.dumps([
        json.loads(record.trace),
        record.run_secs,
        json.loads(record.target),
        None if record.args_info is None else json.loads(record.args_info),
    ])


def _latency_json(latency) -> dict:
    return {"mean_ms": latency.mean_ms, "median_ms": latency.median_ms, "std_ms": latency.std_ms,
            "runs": latency.runs, "warmup": latency.warmup}
