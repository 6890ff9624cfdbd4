"""The coordinator's calls on shard leases: claimed by agents, offered, completed and failed."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from coordinator import metrics
from coordinator.cluster_store import ClusterStore, UnknownAgent
from coordinator.errors import DamagedCostModel
from coordinator.fleet import GroupCommit, LiveAgents, ProgressEvents, ReportSizing
from coordinator.hints import WorkloadJson
from coordinator.ids import rpc_key
from coordinator.values import OfferedTask, ShardOffer, ShardOutcome, TrackerAddress
from foundation.clock import utc_now
from foundation.domain.job_spec import job_options
from foundation.domain.shard_leases import trials_left
from foundation.domain.warm_start_use import WarmStartUse
from foundation.errors import NotFound, RegistryError
from foundation.meta_schedule.warm.cross_model import cross_model_ref
from foundation.meta_schedule.warm.seed_sources import OTHER_FINGERPRINT, OWN_FINGERPRINT, seed_traces_by_id
from foundation.registry.entities import WARM_CONTEXT, ShardClaim, ShardLease
from foundation.registry.store import RegistryStore


class ShardCalls:
    """Shard leases (over FarmAgent). Claims are committed in groups (``claims``); an idle
    agent's poll is answered from memory (``live``) when surely nothing waits for it."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, live: LiveAgents,
                 claims: GroupCommit[ShardClaim, ShardLease | None], workloads: WorkloadJson,
                 progress_events: ProgressEvents, report_sizing: ReportSizing, *, tvm_version: str,
                 tracker: TrackerAddress, warm_records_per_task: int, max_attempts: int,
                 draining: threading.Event, wake: threading.Event):
        self._store = store
        self._cluster = cluster
        self._live = live
        self._claims = claims
        self._workloads = workloads
        self._progress_events = progress_events
        self._report_sizing = report_sizing
        self._tvm_version = tvm_version
        self._tracker = tracker
        self._warm_records_per_task = warm_records_per_task
        self._max_attempts = max_attempts
        self._draining = draining
        self._wake = wake

    def claim_shard(self, agent_id: str, fingerprint_id: str, target_kinds: Sequence[str],
                    on_loop: bool = False) -> Future | None:
        """A claim of a shard for the agent, queued for the next group (its future holds the
        ShardLease or None); None at once when there is surely nothing to lease.
        ``on_loop``: called on the server's event loop, so no registry read is waited for."""
        if self._draining.is_set():
            return None
        known = self._live.cached(agent_id)
        # Most polls come from idle agents when there is nothing to do: answered from memory.
        # (An agent not in memory or a wrong fingerprint goes on to the claim, which reads
        # the registry and says what is wrong.)
        if (known is not None and known.fingerprint_id == fingerprint_id
                and not self._live.may_have_work(fingerprint_id, set(target_kinds) & known.target_kinds,
                                                 wait=not on_loop)):
            return None
        return self._claims.enqueue(ShardClaim(agent_id, fingerprint_id, tuple(target_kinds)))

    def shard_offer(self, lease: ShardLease, fingerprint_id: str) -> ShardOffer:
        """What an agent is sent with a granted lease: tasks, budget, warm-start records, the seeds
        chosen for its tasks when the job was planned, and the cost model its search starts from."""
        job = lease.job
        budget, planned = trials_left(lease.shard.trials_budget, lease.shard.trials_done,
                                      [t.trials_budget for t in lease.tasks])
        per_task = max(1, min(max(planned, default=1), budget))
        warm = []
        records = self._store.records
        for task in lease.tasks:
            # Ranked within one timing context (times of two do not compare): the agent's search
            # starts from them, and its own records are ranked where they are filed.
            context = records.context_to_rank(task.workload_id, job.fingerprint_id, job.target, self._tvm_version,
                                              WARM_CONTEXT)
            for record in records.top_k_records(task.workload_id, job.fingerprint_id, job.target,
                                                self._tvm_version, self._warm_records_per_task, context):
                warm.append((task.workload_shash, _record_json(record)))
        stored = job_options(job)
        planned_seeds = stored.notes.warm_seeds
        seed_ids = [planned_seeds.of(t.name) if planned_seeds else [] for t in lease.tasks]
        seeds = seed_traces_by_id(self._store, job.fingerprint_id, seed_ids) if any(seed_ids) \
            else [[] for _ in lease.tasks]
        warm_start = stored.spec.warm_start
        # The fingerprint's own model, or the cross-hardware one while it has learned few records.
        cost_model = cross_model_ref(self._store, job.fingerprint_id, self._tvm_version) \
            if warm_start and job.fingerprint_id else None
        return ShardOffer(
            lease=lease,
            tasks=[OfferedTask(t.name, t.weight, t.flop, self._workloads.of(t.workload_id, t.mod_json),
                               t.workload_shash, trials, task_seeds)
                   for t, trials, task_seeds in zip(lease.tasks, planned, seeds)],
            target=job.target,
            max_trials_global=budget,
            max_trials_per_task=per_task,
            num_trials_per_iter=max(1, min(16, per_task)),
            tracker_host=self._tracker.host,
            tracker_port=self._tracker.port,
            tracker_key=rpc_key(job.fingerprint_id or fingerprint_id),
            seed=stored.spec.seed,
            report_size=self._report_sizing.offer(),
            warm_records=warm,
            max_seeds_per_task=planned_seeds.max_per_task if planned_seeds and any(seeds) else 0,
            cost_model=cost_model,
        )

    def cost_model_bytes(self, agent_id: str, model_id: int, sha256: str) -> bytes:
        """The bytes of the cost model a shard named, for an agent the coordinator knows."""
        if self._cluster.agents.get_agent(agent_id) is None:
            raise UnknownAgent(f"agent {agent_id!r} is not registered with this coordinator", "register again")
        stored = self._store.cost_models.by_id(model_id)
        if stored is None or stored.sha256 != sha256:
            raise NotFound(f"no cost model {model_id} with sha256 {sha256[:16]}... in the registry",
                           "it learned since the shard was leased: the next shard names the new one")
        try:
            return self._store.cost_models.blob(stored)
        except RegistryError as err:
            raise DamagedCostModel(err.problem, err.fix) from None

    def complete_shard(self, agent_id: str, shard_id: str, attempt: int,
                       summaries: Sequence[dict] = (), warm_start: WarmStartUse | None = None) -> ShardOutcome:
        """End a lease as done; ``warm_start`` is kept with the job."""
        shard = self._cluster.plans.get_shard(shard_id)
        if shard is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        self._write_held_progress(shard.job_id, shard_id)
        change = self._cluster.leases.complete_shard(shard_id, attempt, agent_id, utc_now(), warm_start=warm_start)
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
            if warm_start is not None:
                metrics.warm_start_seeds(OWN_FINGERPRINT, warm_start.seeds_own_fingerprint)
                metrics.warm_start_seeds(OTHER_FINGERPRINT, warm_start.seeds_other_fingerprints)
            self._wake.set()
        return ShardOutcome(change.accepted, change.reason or "", change.shard.state)

    def fail_shard(self, agent_id: str, shard_id: str, attempt: int, reason: str,
                   summaries: Sequence[dict] = ()) -> ShardOutcome:
        shard = self._cluster.plans.get_shard(shard_id)
        if shard is None:
            return ShardOutcome(False, f"shard {shard_id} is unknown")
        self._write_held_progress(shard.job_id, shard_id)
        reason = reason or "the agent gave no reason"
        change = self._cluster.leases.fail_shard(shard_id, attempt, agent_id, reason, utc_now(), self._max_attempts)
        if change.accepted:
            self._log_task_errors(change.shard.job_id, agent_id, shard_id, summaries)
            metrics.shard_failed(change.shard.state)
        return ShardOutcome(change.accepted, change.reason or "", change.shard.state)

    def _write_held_progress(self, job_id: str, shard_id: str) -> None:
        now = utc_now()
        for item in self._progress_events.held_back(shard_id):
            self._cluster.events.append_event(job_id, "task_progress", dict(item, shard_id=shard_id), now)

    def _log_task_errors(self, job_id: str, agent_id: str, shard_id: str, summaries: Sequence[dict]) -> None:
        """Measurement errors are data: each task's count and a sample go into the job's log."""
        for task in summaries:
            errors = int(task.get("build_errors", 0)) + int(task.get("run_errors", 0))
            if not errors:
                continue
            samples = "; ".join(task.get("sample_errors", [])[:3])
            self._cluster.events.append_event(job_id, "log", {
                "source": agent_id, "level": "warning",
                "message": (f"{shard_id} task {task.get('task_name')}: {errors} of {task.get('trials', 0)} "
                            f"candidates failed ({task.get('build_errors', 0)} build, "
                            f"{task.get('run_errors', 0)} run)" + (f": {samples}" if samples else "")),
            }, utc_now())


def _record_json(record) -> str:
    """A stored record as TuningRecord.as_json() text, as agents read it."""
    return json.dumps([
        json.loads(record.trace),
        record.run_secs,
        json.loads(record.target),
        None if record.args_info is None else json.loads(record.args_info),
    ])
