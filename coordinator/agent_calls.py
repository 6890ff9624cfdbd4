"""The coordinator's agent-facing calls: registration, heartbeats, shard and validation leases, reports."""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime

from coordinator import metrics
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
from coordinator.cluster_store import VALIDATION_LEASED
from coordinator.fleet.group_commit import COMMIT_TIMEOUT_S
from coordinator.fleet.report_ingest import UnreadReport
from foundation.domain.jobs import JobState
from foundation.errors import NotFound
from foundation.registry.entities import RecordReport, ShardClaim, ShardLease


@dataclass(frozen=True)
class PreparedReport:
    """A report checked against its job, waiting for its group commit."""

    job_id: str
    report: UnreadReport
    progress: list[dict]


class AgentCalls:
    """Calls from agents (over FarmAgent): a part of the Coordinator (coordinator.service),
    whose state it shares. A reported validation is settled by Housekeeping."""

    def register_agent(self, *, fingerprint_id: str, fingerprint_summary: str, fingerprint_json: str,
                       target_kinds: Sequence[str], hostname: str, tvm_version: str, address: str,
                       build_workers: int = 0, previous_agent_id: str = "") -> Registration:
        from foundation.hardware.targets import FINGERPRINT_KIND, TUNABLE_KINDS

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
            raise InvalidRequest("fingerprint_json is not JSON",
                                 "send foundation.hardware.fingerprint's to_json()") from None
        kind = described.get("kind") or FINGERPRINT_KIND[sorted(target_kinds)[0]]
        self.store.upsert_fingerprint(fingerprint_id, kind, fingerprint_summary or described.get("summary", ""),
                                      described.get("details", {}))
        agent = self.cluster.register_agent(
            fingerprint_id=fingerprint_id, target_kinds=list(target_kinds), hostname=hostname, address=address,
            tvm_version=tvm_version, rpc_key=rpc_key(fingerprint_id),
            details={"build_workers": build_workers}, now=utc_now(), previous_agent_id=previous_agent_id or None,
        )
        self.live.note_registered(agent)
        self.wake.set()  # jobs waiting for this kind of agent can be bound now
        return Registration(agent, self.settings.heartbeat_interval, self.settings.lease_ttl,
                            self.tracker_host, self.tracker_port, agent.rpc_key)

    def heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool = False,
                  sent_at: datetime | None = None) -> list[CancelLease | ReRegister]:
        """Note the agent alive; say which of its leases to stop, or that it must register.

        ``sent_at`` is when the agent listed its leases: a lease is only "lost" if it was
        granted well before that, not merely before this (possibly late) handling. This is
        the path that reads the registry: the server answers settled beats before it, from
        memory (`settled_heartbeat`).
        """
        now = utc_now()
        if self.live.known(agent_id) is None:
            return [ReRegister(f"agent {agent_id} is unknown to this coordinator; register again")]
        self.live.beat(agent_id, now)  # written back by the next tick
        self._rpc_serving[agent_id] = rpc_server_serving
        shards = [r for r in running if job_of_validation(r.shard_id) is None]
        listed = frozenset((r.shard_id, r.attempt) for r in shards)
        version = self.live.lease_version(agent_id)  # before the read the verdict comes from
        verdict = self.cluster.reconcile_leases(
            agent_id, sorted(listed), now,
            grace=2 * self.settings.heartbeat_interval, max_attempts=self.settings.max_attempts,
            as_of=min(sent_at, now) if sent_at is not None else now,
        )
        if verdict.settled:
            self.live.note_settled(agent_id, listed, version)
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

    def settled_heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool) -> bool:
        """Note a heartbeat that can be answered from memory, with nothing to say: a known
        agent listing exactly the shard leases the registry gave it at the current version
        of its leases (`UnitOfWork.lease_version`). False: `heartbeat` must read the registry.
        Takes no lock that waits on the registry, so the server answers it on its event loop
        (coordinator.servicer).
        """
        if self.live.cached(agent_id) is None:
            return False
        listed = frozenset((r.shard_id, r.attempt) for r in running)
        if any(job_of_validation(shard_id) is not None for shard_id, _ in listed):
            return False
        if not self.live.is_settled(agent_id, listed, self.live.lease_version(agent_id)):
            return False
        self.live.beat(agent_id, utc_now())  # written back by the next tick
        self._rpc_serving[agent_id] = rpc_server_serving
        return True

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
        claim = self.claim_shard(agent_id, fingerprint_id, target_kinds)
        lease = None if claim is None else claim.result(COMMIT_TIMEOUT_S)
        return None if lease is None else self.shard_offer(lease, fingerprint_id)

    def claim_shard(self, agent_id: str, fingerprint_id: str, target_kinds: Sequence[str],
                    on_loop: bool = False) -> Future | None:
        """A claim of a shard for the agent, queued for the next group (its future holds the
        ShardLease or None); None at once when there is surely nothing to lease.
        ``on_loop``: called on the server's event loop, so no registry read is waited for."""
        if self.draining:
            return None
        known = self.live.cached(agent_id)
        # Most polls come from idle agents when there is nothing to do: answered from memory.
        # (An agent not in memory or a wrong fingerprint goes on to the claim, which reads
        # the registry and says what is wrong.)
        if (known is not None and known.fingerprint_id == fingerprint_id
                and not self.live.may_have_work(fingerprint_id, set(target_kinds) & known.target_kinds,
                                                wait=not on_loop)):
            return None
        return self._claims.enqueue(ShardClaim(agent_id, fingerprint_id, tuple(target_kinds)))

    def shard_offer(self, lease: ShardLease, fingerprint_id: str) -> ShardOffer:
        """What an agent is sent with a granted lease: tasks, budget, warm-start records."""
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
            report_size=self.report_sizing.offer(),
            warm_records=warm,
        )

    def _module_json_of(self, workload_id: int, stored_json: str) -> str:
        from foundation.meta_schedule.database.registry_database import module_json

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
        (failures are data); a stale attempt keeps nothing. The report is committed with
        the others that arrive meanwhile (coordinator.fleet.group_commit).
        """
        prepared = self.prepare_report(agent_id, shard_id, attempt, records, progress)
        if isinstance(prepared, RecordReport):
            return prepared
        return self.finish_report(prepared, self._ingest.submit(prepared.report))

    def prepare_report(self, agent_id: str, shard_id: str, attempt: int,
                       records: Sequence[tuple[str, str]], progress: Sequence[dict]) -> "PreparedReport | RecordReport":
        """A report checked against its job, ready for `enqueue_report`; or the answer already.

        Its records stay text here: whoever commits the group reads them (coordinator.fleet.report_ingest).
        """
        job = self._job_of_shard(shard_id)
        if job is None:
            return RecordReport(False, f"shard {shard_id} is unknown", 0, 0)
        return self._prepared(job, self.live.known(agent_id), agent_id, shard_id, attempt, records, progress)

    def prepare_cached_report(self, agent_id: str, shard_id: str, attempt: int,
                              records: Sequence[tuple[str, str]], progress: Sequence[dict]) -> "PreparedReport | None":
        """`prepare_report` from memory alone, as almost every report can be; None when the
        registry must be read. Waits on no registry, so the server calls it on its event loop."""
        from foundation.domain.shards import job_of_shard

        with self._lock:
            job = self._reporting_jobs.get(job_of_shard(shard_id))
        agent = self.live.cached(agent_id)
        if job is None or agent is None:
            return None
        return self._prepared(job, agent, agent_id, shard_id, attempt, records, progress)

    def _prepared(self, job: "_ReportingJob", agent, agent_id: str, shard_id: str, attempt: int,
                  records: Sequence[tuple[str, str]], progress: Sequence[dict]) -> "PreparedReport":
        kept, dropped = [], []
        for shash, record_json in records:
            if not record_json:
                continue  # a candidate that failed: a trial without a record
            workload_id = job.workloads.get(shash)
            if workload_id is None:
                dropped.append(f"workload {shash} is not one of job {job.id}'s tasks")
                continue
            kept.append((workload_id, record_json))
        events = [("task_progress", dict(item, shard_id=shard_id))
                  for item in self._progress_events.due(shard_id, list(progress))]
        report = UnreadReport(shard_id, attempt, agent_id, job.id, job.fingerprint_id, job.target, self.tvm_version,
                              {"tvm": agent.tvm_version} if agent else {}, kept, len(records), dropped, events)
        return PreparedReport(job.id, report, list(progress))

    def enqueue_report(self, prepared: "PreparedReport") -> Future:
        """Queue a prepared report for the next group commit; its future holds the RecordReport."""
        return self._ingest.enqueue(prepared.report)

    def finish_report(self, prepared: "PreparedReport", result: RecordReport) -> RecordReport:
        metrics.report_committed(prepared.report, result)
        if result.accepted:
            # An accepted report came from the agent holding the lease: it is alive, as a
            # heartbeat would say; busy agents skip beats that would say nothing more
            # (agent.daemon.heartbeat_due). Written back by the next tick, as beats are.
            self.live.beat(prepared.report.agent_id, utc_now())
            self.report_sizing.note(prepared.report.agent_id, prepared.report.trials)
            with self._lock:
                latest = self._progress.setdefault(prepared.job_id, {})
                for item in prepared.progress:
                    latest[(prepared.report.shard_id, item["task_name"])] = dict(item)
        return result

    def _job_of_shard(self, shard_id: str) -> "_ReportingJob | None":
        """What reports under a shard need of its job; a job's tasks never change once planned."""
        from foundation.domain.shards import job_of_shard

        job_id = job_of_shard(shard_id)
        if job_id is None:
            return None
        with self._lock:
            job = self._reporting_jobs.get(job_id)
        if job is not None:
            return job
        try:
            row = self.store.get_job(job_id)
        except NotFound:
            return None
        tasks = self.cluster.job_tasks(job_id)
        if not tasks:
            return None  # not planned: it has no shards yet
        job = _ReportingJob(row.id, row.fingerprint_id, row.target, {t.workload_shash: t.workload_id for t in tasks})
        with self._lock:
            if len(self._reporting_jobs) > _MAX_REMEMBERED_JOBS:  # a long-lived coordinator forgets old jobs
                self._reporting_jobs.clear()
            self._reporting_jobs[job.id] = job
        return job

    def _write_held_progress(self, job_id: str, shard_id: str) -> None:
        now = utc_now()
        for item in self._progress_events.held_back(shard_id):
            self.cluster.append_event(job_id, "task_progress", dict(item, shard_id=shard_id), now)

    def complete_shard(self, agent_id: str, shard_id: str, attempt: int,
                       summaries: Sequence[dict] = ()) -> ShardOutcome:
        shard = self.cluster.get_shard(shard_id)
        if shard is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        self._write_held_progress(shard.job_id, shard_id)
        change = self.cluster.complete_shard(shard_id, attempt, agent_id, utc_now())
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
            self.wake.set()
        return ShardOutcome(change.accepted, change.reason or "", change.shard.state)

    def fail_shard(self, agent_id: str, shard_id: str, attempt: int, reason: str,
                   summaries: Sequence[dict] = ()) -> ShardOutcome:
        shard = self.cluster.get_shard(shard_id)
        if shard is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        self._write_held_progress(shard.job_id, shard_id)
        reason = reason or "the agent gave no reason"
        change = self.cluster.fail_shard(shard_id, attempt, agent_id, reason, utc_now(),
                                         self.settings.max_attempts)
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
            metrics.shard_failed(change.shard.state)
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

    def may_offer_validation(self, agent_id: str, fingerprint_id: str) -> bool:
        """False when surely no validation waits for this agent, answered from memory without
        waiting on the registry (the server's event loop asks, for every idle poll); True when
        `lease_validation` is worth a try, or must say what is wrong with the agent."""
        if self.draining:
            return False
        known = self.live.cached(agent_id)
        if known is None or known.fingerprint_id != fingerprint_id:
            return True
        return self.live.may_have_work(fingerprint_id, known.target_kinds, wait=False, work="validation")

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


# Jobs whose reporting facts are kept before the memory is cleared and refilled on demand.
_MAX_REMEMBERED_JOBS = 1_000


@dataclass(frozen=True)
class _ReportingJob:
    id: str
    fingerprint_id: str
    target: str
    workloads: dict[str, int]  # task workload shash -> registry workload id


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
