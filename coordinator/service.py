"""The coordinator: jobs, agents, leases and validations over the registry, with no gRPC in sight.

Every method takes and returns plain values; coordinator/servicer.py maps them to the wire.
Everything the coordinator knows is in SQL (RegistryStore, ClusterStore), so a restarted
coordinator carries on: `tick` re-plans jobs left queued, rebuilds jobs left building, and
settles validations reported while it was away. What is kept in memory only speeds things up.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from coordinator.artifacts import LIBRARY_FORMAT, commit_artifact, find_hit, record_hit
from coordinator.job_work import (
    BackgroundWorker,
    ModelCache,
    build_libraries,
    plan_tasks,
    store_onnx,
)
from coordinator.jobs import JobState
from coordinator.model_key import ModelKey, check_batch, looks_like_path, model_key
from coordinator.registry.cluster_store import (
    VALIDATION_DONE,
    VALIDATION_FAILED,
    VALIDATION_LEASED,
    VALIDATION_PENDING,
    ClusterStore,
)
from coordinator.registry.entities import (
    Agent,
    Artifact,
    Job,
    JobEvent,
    Model,
    RecordReport,
    ShardLease,
    StoredShard,
    ValidationLease,
)
from coordinator.registry.store import RegistryStore
from coordinator.shards import DEFAULT_MAX_ATTEMPTS, JobOutcome, ShardState, TaskCost, split_tasks
from farm.errors import FarmError, NotFound

logger = logging.getLogger("farm.coordinator")

DEFAULT_VALIDATION_RUNS = 20
VALIDATION_WARMUP = 3


class InvalidRequest(FarmError):
    """The caller asked for something that cannot be done as asked (bad model, target, ...)."""


class Unavailable(FarmError):
    """The coordinator is shutting down and takes no new work."""


class AgentRefused(FarmError):
    """An agent that cannot take part (e.g. another TVM version than the coordinator's)."""


@dataclass(frozen=True)
class CoordinatorSettings:
    data_dir: Path
    heartbeat_interval: float = 5.0
    # A few intervals, so one late beat is not fatal.
    lease_ttl: float = 30.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    records_per_report: int = 16
    # Records per task handed to an agent for its warm start.
    warm_records_per_task: int = 32
    # How long an idle agent waits before asking for work again.
    idle_retry_after: float = 1.0


# --------------------------------------------------------------------------- requests and answers


@dataclass(frozen=True)
class OnnxUpload:
    file_name: str
    content: bytes
    sha256: str


@dataclass(frozen=True)
class SubmitSpec:
    target: str
    batch: int
    zoo_name: str | None = None
    onnx: OnnxUpload | None = None
    fingerprint_id: str | None = None
    trials: int | None = None
    trials_per_task: int | None = None
    retune: bool = False
    seed: int = 0
    validation_runs: int | None = None


@dataclass(frozen=True)
class Submitted:
    job: Job
    attached: bool


@dataclass(frozen=True)
class JobView:
    """A job with what its wire form shows besides the row: model, shards, artifact, errors."""

    job: Job
    model: Model | None
    shard_counts: dict[ShardState, int]
    failed_shards: list[StoredShard]
    artifact: Artifact | None
    trial_errors: int


@dataclass(frozen=True)
class AgentView:
    agent: Agent
    fingerprint_summary: str
    running_leases: list[tuple[str, str, int]]  # (job id, shard id, attempt)
    rpc_server_serving: bool


@dataclass(frozen=True)
class LeaseRef:
    job_id: str
    shard_id: str  # a shard id, or a validation id (`validation_id`)
    attempt: int


@dataclass(frozen=True)
class CancelLease:
    lease: LeaseRef
    reason: str


@dataclass(frozen=True)
class ReRegister:
    reason: str


@dataclass(frozen=True)
class Registration:
    agent: Agent
    heartbeat_interval: float
    lease_ttl: float
    tracker_host: str
    tracker_port: int
    tracker_key: str


@dataclass(frozen=True)
class OfferedTask:
    name: str
    weight: int
    flop: float
    mod_json: str  # tvm.ir.save_json of the task's IRModule
    workload_shash: str


@dataclass(frozen=True)
class ShardOffer:
    lease: ShardLease
    tasks: list[OfferedTask]
    target: str
    max_trials_global: int
    max_trials_per_task: int
    num_trials_per_iter: int
    tracker_host: str
    tracker_port: int
    tracker_key: str
    seed: int
    records_per_report: int
    warm_records: list[tuple[str, str]]  # (workload shash, TuningRecord JSON)


@dataclass(frozen=True)
class ValidationOffer:
    lease: ValidationLease
    validation_id: str
    # Weight values for models whose weights are data (ONNX); empty: drawn from the specs.
    weight_values: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ShardOutcome:
    accepted: bool
    reason: str
    shard_state: ShardState | None = None


@dataclass(frozen=True)
class ValidationReport:
    """What an agent found: ``check`` and ``latency`` (agent.validation values), or ``error``."""

    check: Any = None  # agent.validation.ValidationResult
    latency: Any = None  # agent.library_runner.Latency
    untuned_latency: Any = None
    error: str = ""


def validation_id(job_id: str) -> str:
    """A job's validation lease is named apart from its shards (`<job>.s<i>`)."""
    return f"{job_id}.validation"


def job_of_validation(validation: str) -> str | None:
    suffix = ".validation"
    return validation[: -len(suffix)] if validation.endswith(suffix) else None


def rpc_key(fingerprint_id: str) -> str:
    """The tracker key of a fingerprint's RPC servers: any of them can measure for it."""
    return f"farm-{fingerprint_id}"


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# --------------------------------------------------------------------------- the coordinator


class Coordinator:
    """Jobs, agents, shard and validation leases; `tick` moves jobs along in the background."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, tracker_address: str,
                 settings: CoordinatorSettings):
        from coordinator.tracker import parse_tracker_address
        from farm.versions import tvm_version

        self.store = store
        self.cluster = cluster
        self.settings = settings
        self.tracker_host, self.tracker_port = parse_tracker_address(tracker_address)
        self.tvm_version = tvm_version()
        self.draining = False
        self._models = ModelCache(settings.data_dir)
        self._planner = BackgroundWorker("farm-planner")
        self._builder = BackgroundWorker("farm-builder")
        self._lock = threading.Lock()
        # In memory only, as hints: the RPC server flag of each agent's last heartbeat, the
        # latest progress of each task (rebuilt from the job's events when missing), and the
        # save_json form of workloads handed to agents.
        self._rpc_serving: dict[str, bool] = {}
        self._progress: dict[str, dict[tuple[str, str], dict]] = {}
        self._module_json: dict[int, str] = {}
        self._settle_lock = threading.Lock()
        self.wake = threading.Event()  # set when a tick should come early

    def close(self) -> None:
        self._planner.stop()
        self._builder.stop()

    # ------------------------------------------------------------------ client calls

    def submit(self, spec: SubmitSpec) -> list[Submitted]:
        """Start (or attach to, or answer from the registry) one job per fingerprint."""
        from farm.targets import FINGERPRINT_KIND, canonical_target, parse_target_kind, target_json

        if self.draining:
            raise Unavailable("the coordinator is shutting down", "submit again once it is back")
        kind = parse_target_kind(spec.target)
        try:
            check_batch(spec.batch)
        except FarmError as err:
            raise InvalidRequest(err.problem, err.fix) from None
        key = self._model_key(spec)
        options = {
            "trials": spec.trials or None,
            "trials_per_task": spec.trials_per_task or None,
            "retune": spec.retune,
            "seed": int(spec.seed),
            "validation_runs": spec.validation_runs or DEFAULT_VALIDATION_RUNS,
            "mode": "distributed",
        }
        if spec.fingerprint_id:
            stored = self.store.get_fingerprint(spec.fingerprint_id)
            if stored is None or stored.kind != FINGERPRINT_KIND[kind]:
                known = [f.id for f in self.store.list_fingerprints() if f.kind == FINGERPRINT_KIND[kind]]
                raise InvalidRequest(
                    f"no {FINGERPRINT_KIND[kind]} fingerprint {spec.fingerprint_id!r} is known for target {kind}",
                    f"known: {', '.join(known) or 'none'}; an agent registers its fingerprint when it starts",
                )
            fingerprint_ids = [stored.id]
        else:
            fingerprint_ids = list(self.cluster.agents_matching(kind))

        submitted = []
        model: Model | None = None
        for fp_id in fingerprint_ids:
            fingerprint = _fingerprint_of(self.store, fp_id)
            target = target_json(canonical_target(spec.target, fingerprint))
            if not spec.retune:
                hit = find_hit(self.store, key, target, fp_id, self.tvm_version)
                if hit is not None:
                    submitted.append(Submitted(record_hit(self.store, hit, target, fp_id, options), False))
                    continue
            model = model or self._ensure_model(key)
            running = self.cluster.attachable_job(model.id, target, fp_id)
            if running is not None:
                submitted.append(Submitted(running, True))
                continue
            job = self.cluster.create_job(
                model_id=model.id, target_request=spec.target, target_kind=kind, target=target,
                fingerprint_id=fp_id, trials_budget=0, options=options, now=utc_now(),
                status="queued: extracting tuning tasks",
            )
            submitted.append(Submitted(job, False))
        if not fingerprint_ids:
            model = self._ensure_model(key)
            running = self.cluster.attachable_job(model.id, spec.target, None)
            if running is not None:
                return [Submitted(running, True)]
            job = self.cluster.create_job(
                model_id=model.id, target_request=spec.target, target_kind=kind, target="",
                fingerprint_id=None, trials_budget=0, options=options, now=utc_now(),
                status=_waiting_status(kind),
            )
            submitted.append(Submitted(job, False))
        self.wake.set()
        return submitted

    def _model_key(self, spec: SubmitSpec) -> ModelKey:
        if spec.onnx is not None:
            digest = hashlib.sha256(spec.onnx.content).hexdigest()
            if spec.onnx.sha256 and spec.onnx.sha256.lower() != digest:
                raise InvalidRequest(
                    f"the ONNX file {spec.onnx.file_name!r} arrived with sha256 {digest}, "
                    f"not the {spec.onnx.sha256} it was sent with",
                    "the upload was damaged or the hash is of another file; send it again",
                )
            if not spec.onnx.content:
                raise InvalidRequest(f"the ONNX file {spec.onnx.file_name!r} is empty", "send the model's bytes")
            path = store_onnx(self.settings.data_dir, digest, spec.onnx.content)
            name = Path(spec.onnx.file_name).stem or digest[:12]
            return ModelKey(name, spec.batch, "onnx", digest, path)
        name = spec.zoo_name or ""
        if not name or looks_like_path(name):
            raise InvalidRequest(
                f"{name!r} is not a zoo model name" if name else "the request names no model",
                "name a zoo model (see `farm models`), or send an ONNX file's bytes",
            )
        try:
            return model_key(name, spec.batch)
        except NotFound as err:  # an unknown name is bad input here, not a missing resource
            raise InvalidRequest(err.problem, err.fix) from None

    def _ensure_model(self, key: ModelKey) -> Model:
        """The registry's row for the model, loading it (TVM) the first time it is seen."""
        from coordinator.models.zoo import load_model

        stored = self.store.find_model(key.name, key.batch, key.source_digest)
        if stored is not None:
            return stored
        try:
            loaded = load_model(str(key.path) if key.path else key.name, key.batch)
        except NotFound as err:
            raise InvalidRequest(err.problem, err.fix) from None
        model = self.store.upsert_model(
            model_id=loaded.identity(), name=key.name, source=key.source, source_digest=key.source_digest,
            batch=key.batch, inputs=[s.to_json() for s in loaded.inputs],
            weights=[s.to_json() for s in loaded.weights], num_parameters=loaded.num_parameters,
        )
        self._models.put(model.id, loaded)
        return model

    def get_job(self, job_id: str) -> JobView:
        job = self.store.get_job(job_id)
        shards = self.cluster.shards_of(job_id)
        counts = {state: 0 for state in ShardState}
        for shard in shards:
            counts[shard.state] += 1
        artifact = self.store.get_artifact(job.artifact_id) if job.artifact_id else None
        return JobView(
            job=job,
            model=self.store.get_model(job.model_id),
            shard_counts=counts,
            failed_shards=[s for s in shards if s.state is ShardState.FAILED],
            artifact=artifact,
            trial_errors=self._trial_errors(job_id),
        )

    def list_jobs(self, limit: int = 20, states: Sequence[str] = (), model_name: str = "") -> list[JobView]:
        limit = limit or 20
        wanted = set(states)
        if not wanted and not model_name:
            jobs = self.store.list_jobs(limit=limit)
        else:
            # Filters the store does not offer are applied here, over a generous window.
            jobs = [j for j in self.store.list_jobs(limit=max(limit * 20, 1000))
                    if not wanted or j.state in wanted]
            if model_name:
                names = {}
                jobs = [j for j in jobs if names.setdefault(j.model_id, _model_name(self.store, j.model_id))
                        == model_name]
            jobs = jobs[:limit]
        return [self.get_job(j.id) for j in jobs]

    def events(self, job_id: str, after_sequence: int, limit: int = 500) -> list[JobEvent]:
        """A job's events after ``after_sequence`` (WatchJob polls this)."""
        return self.cluster.events_after(job_id, after_sequence, limit)

    def last_event_sequence(self, job_id: str) -> int:
        self.store.get_job(job_id)  # NotFound for an unknown id
        return self.cluster.last_event_sequence(job_id)

    def cancel_job(self, job_id: str, reason: str = "") -> JobView:
        self.cluster.cancel_job(job_id, utc_now(), reason or "cancelled by user")
        return self.get_job(job_id)

    def list_agents(self, target_kind: str = "", include_lost: bool = False) -> list[AgentView]:
        views = []
        summaries: dict[str, str] = {}
        for agent in self.cluster.list_agents(target_kind or None, include_lost=include_lost):
            if agent.fingerprint_id not in summaries:
                fp = self.store.get_fingerprint(agent.fingerprint_id)
                summaries[agent.fingerprint_id] = fp.summary if fp else ""
            leases = [(s.job_id, s.id, s.attempt) for s in self.cluster.leases_of_agent(agent.id)]
            validation = self._validation_held_by(agent.id)
            if validation is not None:
                leases.append(validation)
            views.append(AgentView(agent, summaries[agent.fingerprint_id], leases,
                                   self._rpc_serving.get(agent.id, False)))
        return views

    # ------------------------------------------------------------------ agent calls

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

    def heartbeat(self, agent_id: str, running: Sequence[LeaseRef], rpc_server_serving: bool = False
                  ) -> list[CancelLease | ReRegister]:
        """Note the agent alive; say which of its leases to stop, or that it must register."""
        now = utc_now()
        if self.cluster.heartbeat(agent_id, now) is None:
            return [ReRegister(f"agent {agent_id} is unknown to this coordinator; register again")]
        self._rpc_serving[agent_id] = rpc_server_serving
        shards = [r for r in running if job_of_validation(r.shard_id) is None]
        verdict = self.cluster.reconcile_leases(
            agent_id, [(r.shard_id, r.attempt) for r in shards], now,
            grace=2 * self.settings.heartbeat_interval, max_attempts=self.settings.max_attempts,
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

    # ------------------------------------------------------------------ background

    def tick(self, now: dt.datetime | None = None) -> None:
        """One round of housekeeping; the server runs it every fraction of a second."""
        now = now or utc_now()
        ttl, attempts = self.settings.lease_ttl, self.settings.max_attempts
        for agent in self.cluster.mark_lost_agents(now, ttl):
            logger.info("agent %s (%s) missed its heartbeat TTL; its leases are re-queued", agent.id, agent.hostname)
        self.cluster.expire_leases(now, ttl, attempts)
        self.cluster.expire_validations(now, ttl, attempts)
        self._bind_waiting_jobs(now)
        for job in self.store.list_jobs(limit=500, state=JobState.QUEUED.value):
            if job.fingerprint_id is not None:
                self._planner.submit(job.id, lambda job_id=job.id: self._plan(job_id))
        for job in self.store.list_jobs(limit=500, state=JobState.RUNNING.value):
            if self.cluster.job_rollup(job.id).outcome is JobOutcome.READY_TO_BUILD:
                self._move(job.id, JobState.RUNNING, JobState.BUILDING,
                           "building: compiling with the best records, and an untuned reference")
        for job in self.store.list_jobs(limit=500, state=JobState.BUILDING.value):
            # Also the builds a previous coordinator process did not finish.
            self._builder.submit(job.id, lambda job_id=job.id: self._build(job_id))
        for job in self.store.list_jobs(limit=500, state=JobState.VALIDATING.value):
            validation = self.cluster.get_validation(job.id)
            if validation is not None and validation.state in (VALIDATION_DONE, VALIDATION_FAILED):
                self._settle_validation(job.id)

    def _bind_waiting_jobs(self, now: dt.datetime) -> None:
        from farm.targets import TUNABLE_KINDS, canonical_target, target_json

        for kind in TUNABLE_KINDS:
            waiting = self.cluster.queued_jobs_without_fingerprint(kind)
            if not waiting:
                continue
            matching = self.cluster.agents_matching(kind)
            if not matching:
                continue
            # The fingerprint with the most agents tunes fastest.
            fp_id = max(sorted(matching), key=lambda f: matching[f])
            fingerprint = _fingerprint_of(self.store, fp_id)
            for job in waiting:
                try:
                    target = target_json(canonical_target(job.target_request, fingerprint))
                except FarmError as err:
                    self._move(job.id, JobState.QUEUED, JobState.FAILED, "failed: bad target", error=str(err))
                    continue
                self.cluster.bind_job_fingerprint(job.id, fp_id, target, now,
                                                  status="queued: extracting tuning tasks")

    def _plan(self, job_id: str) -> None:
        """Extract the job's tasks and split them into shards (queued -> running), once."""
        job = self.store.get_job(job_id)
        if job.state != JobState.QUEUED.value or job.fingerprint_id is None:
            return
        try:
            model = self.store.get_model(job.model_id)
            plan = plan_tasks(self._models.get(model), job.target, job.options.get("trials"),
                              job.options.get("trials_per_task"))
            agents = self.cluster.agents_matching(job.target_kind).get(job.fingerprint_id, 0)
            shards = split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop) for t in plan.tasks],
                                 agents, plan.max_trials_global)
            self.store.update_job(job.id, expect_state=JobState.QUEUED.value, trials_budget=plan.max_trials_global)
            self.cluster.add_job_plan(job.id, plan.tasks, shards, utc_now())
        except Exception as err:  # noqa: BLE001 - the job says why it could not be planned
            if self.store.get_job(job_id).state == JobState.QUEUED.value:
                logger.exception("planning %s failed", job_id)
                self._move(job_id, JobState.QUEUED, JobState.FAILED, "failed: could not extract tuning tasks",
                           error=f"planning failed: {type(err).__name__}: {err}"[:2000])
            return
        logger.info("job %s: %d tasks in %d shards, %d trials", job_id, len(plan.tasks), len(shards),
                    plan.max_trials_global)
        self.wake.set()

    def _build(self, job_id: str) -> None:
        """Build the tuned library and the untuned reference, and offer them for validation."""
        job = self.store.get_job(job_id)
        if job.state != JobState.BUILDING.value:
            return
        validating = (f"validating: waiting for an agent of fingerprint {job.fingerprint_id} "
                      "to check and time the library")
        existing = self.cluster.get_validation(job_id)
        if existing is not None and existing.state in (VALIDATION_PENDING, VALIDATION_LEASED):
            # Built before a restart; only the move was lost.
            self._move(job_id, JobState.BUILDING, JobState.VALIDATING, validating)
            return
        try:
            from farm.versions import software_versions

            model = self.store.get_model(job.model_id)
            loaded = self._models.get(model)
            library, reference = build_libraries(self.store, loaded, job.target, job.fingerprint_id,
                                                 self.tvm_version, software_versions(job.target_kind))
            if self.store.get_job(job_id).state != JobState.BUILDING.value:
                return  # cancelled while building
            self.cluster.create_validation(
                job_id, library=library, lib_format=LIBRARY_FORMAT, reference_library=reference,
                inputs=[s.to_json() for s in loaded.inputs], weights=[s.to_json() for s in loaded.weights],
                seed=int(job.options.get("seed") or 0),
                runs=int(job.options.get("validation_runs") or DEFAULT_VALIDATION_RUNS),
                warmup=VALIDATION_WARMUP, now=utc_now(),
            )
        except Exception as err:  # noqa: BLE001 - the job says why it could not be built
            logger.exception("building %s failed", job_id)
            self._move(job_id, JobState.BUILDING, JobState.FAILED, "failed: the build failed",
                       error=f"build failed: {type(err).__name__}: {err}"[:2000])
            return
        self._move(job_id, JobState.BUILDING, JobState.VALIDATING, validating)

    def _settle_validation(self, job_id: str) -> None:
        """A validating job whose validation ended: commit the artifact, or fail the job."""
        from agent.library_runner import Latency
        from agent.validation import ValidationResult
        from farm.versions import software_versions

        with self._settle_lock:
            job = self.store.get_job(job_id)
            validation = self.cluster.get_validation(job_id)
            if job.state != JobState.VALIDATING.value or validation is None:
                return
            if validation.state == VALIDATION_FAILED:
                reasons = "; ".join(f"attempt {f.attempt} on {f.agent_id}: {f.reason}" for f in validation.failures)
                self._move(job_id, JobState.VALIDATING, JobState.FAILED, "failed: the library could not be validated",
                           error=f"validation could not run: {reasons}"[:4000])
                return
            if validation.state != VALIDATION_DONE:
                return
            result = validation.result or {}
            check = ValidationResult(**{k: v for k, v in result["validation"].items() if k != "rule"})
            if not check.passed:
                self._move(job_id, JobState.VALIDATING, JobState.FAILED, "failed: validation",
                           error=f"tuned library disagrees with the untuned build: {check.reason}")
                return
            artifact = next((a for a in self.store.list_artifacts(model_id=job.model_id,
                                                                  fingerprint_id=job.fingerprint_id)
                             if a.job_id == job_id), None)
            if artifact is None:  # not committed before a restart
                latency = Latency(**result["latency"])
                untuned = Latency(**result["untuned_latency"]) if result.get("untuned_latency") else None
                artifact = commit_artifact(
                    self.store, model_id=job.model_id, target_json=job.target, fingerprint_id=job.fingerprint_id,
                    job_id=job_id, library=self._validation_library(job_id), latency=latency,
                    untuned_latency=untuned, validation=check, tvm_version=self.tvm_version,
                    software=software_versions(job.target_kind),
                )
            self._move(job_id, JobState.VALIDATING, JobState.SUCCEEDED,
                       f"succeeded: validated on {result.get('agent_id')}, {artifact.latency_mean_ms:.3f} ms mean",
                       artifact_id=artifact.id)

    def _validation_library(self, job_id: str) -> bytes:
        """The library a validation checked (the ClusterStore hands it out only with a lease)."""
        from sqlalchemy import select

        from coordinator.registry.schema import ValidationRow

        with self.store.unit_of_work() as session:
            library = session.scalar(select(ValidationRow.library).where(ValidationRow.job_id == job_id))
        if library is None:
            raise NotFound(f"job {job_id} has no built library")
        return bytes(library)

    def _move(self, job_id: str, current: JobState, new: JobState, status: str, *,
              error: str | None = None, **fields: Any) -> bool:
        """Move a job, guarded by the state it is expected in, with its state_changed event.

        False if the job had left ``current`` (cancelled meanwhile, or moved by another
        thread): the caller's step is then moot.
        """
        from sqlalchemy import update

        from coordinator.registry.schema import JobRow
        from farm.errors import RegistryError

        now = utc_now()
        # ClusterStore's own move, in its unit of work so that the state, the status line,
        # any extra field and the event commit together. (TODO for the store's owner: a
        # public ClusterStore.move_job(job_id, current, new, now, status, error, **fields).)
        cluster = self.cluster
        try:
            with cluster._unit(write=True) as session:  # noqa: SLF001
                row = cluster._lock_job(session, job_id)  # noqa: SLF001
                if row.state != current.value:
                    return False
                cluster._move_job(session, row, new, now, status=status, error=error)  # noqa: SLF001
                if fields:
                    session.execute(update(JobRow).where(JobRow.id == job_id).values(**fields)
                                    .execution_options(synchronize_session=False))
        except RegistryError:
            return False
        if new in (JobState.BUILDING, JobState.VALIDATING):
            self.wake.set()
        return True

    def _validation_held_by(self, agent_id: str) -> tuple[str, str, int] | None:
        for job in self.store.list_jobs(limit=100, state=JobState.VALIDATING.value):
            validation = self.cluster.get_validation(job.id)
            if validation and validation.state == VALIDATION_LEASED and validation.agent_id == agent_id:
                return (job.id, validation_id(job.id), validation.attempt)
        return None

    def _trial_errors(self, job_id: str) -> int:
        with self._lock:
            progress = self._progress.get(job_id)
        if progress is None:
            progress = {}
            after = 0
            while True:
                events = self.cluster.events_after(job_id, after, 1000)
                for event in events:
                    if event.kind == "task_progress":
                        progress[(event.payload.get("shard_id", ""), event.payload.get("task_name", ""))] = \
                            event.payload
                if len(events) < 1000:
                    break
                after = events[-1].sequence
            with self._lock:
                progress = self._progress.setdefault(job_id, progress)
        return sum(int(p.get("build_errors", 0)) + int(p.get("run_errors", 0)) for p in progress.values())


# --------------------------------------------------------------------------- helpers


def _waiting_status(kind: str) -> str:
    return (f"waiting for an agent with target kind {kind} (none registered); "
            "start `farm agent` on such a box")


def _fingerprint_of(store: RegistryStore, fp_id: str):
    from agent.fingerprint import Fingerprint

    stored = store.get_fingerprint(fp_id)
    if stored is None:
        raise InvalidRequest(f"fingerprint {fp_id!r} is not in the registry",
                             "start an agent of that fingerprint first")
    # The stored id is trusted, not recomputed (see Fingerprint.from_json).
    return Fingerprint(stored.id, stored.kind, stored.summary, dict(stored.details))


def _model_name(store: RegistryStore, model_id: str) -> str:
    model = store.get_model(model_id)
    return model.name if model else ""


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
