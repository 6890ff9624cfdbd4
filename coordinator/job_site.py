"""Where a distributed job's tuning and validation run: shards leased to agents, a validation leased to an
agent of the job's fingerprint. The recipe around them is the embedded farm's (foundation.job_driver.pipeline).

`CoordinatorJobs.advance` takes one job one step on; housekeeping (coordinator.housekeeping) calls it for
each job that has a step to take, plans and builds on background threads of their own, and a reported
validation (coordinator.calls.validations) calls it at once. Every move of a job is guarded by the state
its step found, so a step that lost a race (a job cancelled meanwhile, a second coordinator thread)
changes nothing.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator import metrics
from coordinator.background_worker import BackgroundWorker
from coordinator.cluster_store import ClusterStore
from coordinator.hints import WorkloadJson
from coordinator.job_rounds import JobRounds
from coordinator.model_cache import ModelCache
from coordinator.onnx_uploads import onnx_path
from foundation.clock import utc_now
from foundation.domain.job_rollup import JobOutcome
from foundation.domain.job_spec import noted
from foundation.domain.jobs import JobState
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.domain.validations import ValidationState
from foundation.domain.warm_seeds import WarmSeeds
from foundation.errors import NotFound, RegistryError
from foundation.job_driver import steps
from foundation.job_driver.artifacts import LIBRARY_FORMAT
from foundation.job_driver.driver import JobDriver
from foundation.job_driver.pipeline import JobPipeline, JobWork, Tuned, TuningStart, Validated, target_of
from foundation.logs import log_ids
from foundation.registry.store import RegistryStore
from foundation.tvm_ir_lock import TVM_IR_LOCK

if TYPE_CHECKING:  # pragma: no cover
    from foundation.models.loaded import LoadedModel
    from foundation.registry.entities import Job

logger = logging.getLogger("farm.coordinator")


class CoordinatorJobs:
    """The coordinator's jobs advanced through the recipe, their tuning and validation on agents."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, models: ModelCache, workloads: WorkloadJson,
                 tvm_version: str, wake: threading.Event, data_dir: Path):
        self.site = AgentsSite(store, cluster, models, workloads, tvm_version, wake, data_dir)
        self._pipeline = JobPipeline(store, ClusterJobMoves(cluster, wake), self.site)

    def close(self) -> None:
        self.site.close()

    def advance(self, job_id: str, state: JobState) -> None:
        """Take the job one step on from ``state``, the state its caller saw it in (nothing when it left it:
        each thread takes the steps it was given); a step's error has failed the job already, and is
        logged here."""
        with log_ids(job_id=job_id):
            work = self._pipeline.work(job_id)
            if work.state is not state:
                return
            try:
                self._pipeline.advance(work)
            except Exception:
                logger.exception("job %s: its %s step failed", job_id, state.value)

    def settle(self, job_id: str) -> None:
        """A validating job whose validation ended: commit the artifact, or fail the job."""
        self.advance(job_id, JobState.VALIDATING)

    def fail(self, job_id: str, state: JobState, status: str, error: str) -> bool:
        return JobDriver(self._pipeline.moves, job_id, state).fail(error, status)


class AgentsSite:
    """The coordinator's JobSite: a job's tasks split into shards that agents lease (in rounds for
    `--until`: coordinator.job_rounds), and its library validated by an agent of its fingerprint."""

    ir_lock = TVM_IR_LOCK

    def __init__(self, store: RegistryStore, cluster: ClusterStore, models: ModelCache, workloads: WorkloadJson,
                 tvm_version: str, wake: threading.Event, data_dir: Path):
        self._store = store
        self._cluster = cluster
        self._models = models
        self._workloads = workloads
        self.tvm_version = tvm_version
        self._wake = wake
        self._data_dir = data_dir
        self.rounds = JobRounds(store, cluster, models, workloads, tvm_version, data_dir, wake)
        # Training takes seconds to minutes of CPU: never on a gRPC handler or the tick.
        self._learner = BackgroundWorker("farm-learner")

    def close(self) -> None:
        self._learner.stop()

    def model(self, job: "Job") -> "LoadedModel":
        return self._models.get(self._store.get_model(job.model_id))

    def target(self, job: "Job"):
        return target_of(job)

    def database(self, job: "Job") -> Any:
        from foundation.meta_schedule.database.registry_database import tvm_database_for

        return tvm_database_for(self._store, job.fingerprint_id, job.target, self.tvm_version, self.software(job))

    def software(self, job: "Job") -> dict:
        from foundation.hardware.versions import software_versions

        return software_versions(job.target_kind)

    def onnx_file(self, job: "Job") -> bytes | None:
        model = self._store.get_model(job.model_id)
        return onnx_path(self._data_dir, model.source_digest).read_bytes() if model.source == "onnx" else None

    def tell(self, job: "Job", stage: str, detail: str) -> None:
        logger.info("job %s: %s: %s", job.id, stage, detail)

    def cancel_requested(self, job: "Job") -> str | None:
        return None  # `farm cancel` moves a distributed job itself (ClusterStore.plans.cancel_job)

    def start_tuning(self, work: JobWork, start: TuningStart, driver: JobDriver) -> None:
        """The job's tasks and shards stored and the job running, at once (ClusterStore.plans.add_job_plan)."""
        if start.rounds is not None:
            self.rounds.start(work.job, start)
            return
        import tvm_ffi

        from foundation.meta_schedule.database.registry_database import workload_json
        from foundation.registry.entities import PlannedTask

        job, spec, planned = work.job, work.spec, start.planned
        reused = planned.reused
        assert reused is not None
        # A task skipped, or planned no trial, is not planned; each task's trials are its own cap. Each
        # planned task gets the donor records the seeds step chose for it, as record ids for its shards.
        tuned = [(task, trials) for task, trials in zip(reused.tasks, reused.trial_caps) if trials > 0]
        with TVM_IR_LOCK:
            seeds = steps.seeds(self._store, job.fingerprint_id, job.target, self.tvm_version, spec,
                                [t for t, _ in tuned], [trials for _, trials in tuned])
        tasks = [PlannedTask(name=task.name, weight=task.weight, flop=task.flop,
                             workload_shash=str(tvm_ffi.structural_hash(task.mod)), mod_json=workload_json(task.mod),
                             trials_budget=trials) for task, trials in tuned]
        warm_seeds = WarmSeeds(seeds.per_task, {t.name: tuple(s.record_id for s in traces)
                                                for t, traces in zip(tasks, seeds.traces) if traces})
        agents = self._cluster.agents.agents_matching(job.target_kind).get(job.fingerprint_id, 0)
        # Shards are balanced by planned trials, and each carries its tasks' plans; a job with every task
        # skipped has none and goes on to its build.
        shards = split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop, t.trials_budget) for t in tasks],
                             agents, start.trials_budget)
        self._store.update_job(job.id, expect_state=JobState.QUEUED.value, trials_budget=start.trials_budget,
                               options=noted(job, **start.notes, warm_seeds=warm_seeds))
        self._cluster.plans.add_job_plan(job.id, tasks, shards, utc_now())
        self.rounds.remember_workloads(job.id)
        logger.info("job %s: %d tasks in %d shards, %d trials; %s", job.id, len(tasks), len(shards),
                    start.trials_budget, reused.plan.describe())
        self._wake.set()

    def tuned(self, work: JobWork) -> Tuned | None:
        """Once every shard is done: a job tuned in rounds has its round judged, and goes on to the next."""
        job = work.job
        if self._cluster.plans.job_rollup(job.id).outcome is not JobOutcome.READY_TO_BUILD:
            return None
        if work.spec.until is None:
            return Tuned(job.trials_done)
        outcome = self.rounds.end_round(job)
        return None if outcome is None else Tuned(job.trials_done, rounds=outcome)

    def built_before(self, work: JobWork) -> tuple[bytes | None, bytes | None]:
        return self.rounds.take_library(work.job.id), None

    def validation_pending(self, work: JobWork) -> bool:
        existing = self._cluster.validations.get_validation(work.job.id)
        return existing is not None and not existing.state.is_final

    def start_validation(self, work: JobWork, built: "steps.Built") -> None:
        """The validation step runs on an agent of the job's fingerprint, with the embedded mode's settings."""
        loaded = self.model(work.job)
        settings = steps.validation_settings(work.spec)
        self._cluster.validations.create_validation(
            work.job.id, library=built.library, lib_format=LIBRARY_FORMAT, reference_library=built.reference,
            inputs=[s.to_json() for s in loaded.inputs], weights=[s.to_json() for s in loaded.weights],
            seed=settings.seed, runs=settings.runs, warmup=settings.warmup, now=utc_now(),
        )

    def validating_where(self, work: JobWork) -> str:
        return f"waiting for an agent of fingerprint {work.job.fingerprint_id} to check and time the library"

    def validated(self, work: JobWork) -> Validated | None:
        job_id = work.job.id
        validation = self._cluster.validations.get_validation(job_id)
        if validation is None:
            return None

        def library_of(untuned: bool) -> bytes:
            # The library a validation checked, or its untuned build (a claim hands them out only with its lease).
            library = self._cluster.validations.validation_library(job_id, untuned)
            if library is None:
                raise NotFound(f"job {job_id} has no built library")
            return library

        if validation.state is ValidationState.FAILED:
            reasons = "; ".join(f"attempt {f.attempt} on {f.agent_id}: {f.reason}" for f in validation.failures)
            return Validated(None, library_of, could_not_run=reasons)
        if validation.state is not ValidationState.DONE:
            return None
        result = validation.result or {}
        return Validated(steps.reported_check(result), library_of, where=f", validated on {result.get('agent_id')}")

    def succeeded(self, work: JobWork, committed: "steps.Committed") -> None:
        if committed.new:
            metrics.artifact_committed()
        job = work.job
        # One learner per fingerprint at a time; a job ending meanwhile is learned by the next refresh
        # (it takes every record since the model's last).
        self._learner.submit(f"learn:{job.fingerprint_id}", lambda: self.learn(job.fingerprint_id, job.target))

    def learn(self, fingerprint_id: str, target_json: str) -> None:
        """Teach the fingerprint's stored cost model the records its agents reported, as the
        embedded mode does after a job: the next job's shards start from it."""
        from foundation.hardware.targets import to_tvm_target
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.meta_schedule.warm.job_start import learn_from_job

        target_doc = json.loads(target_json)
        install_lean_tensor_intrinsics(target_doc["kind"])
        learn_from_job(self._store, fingerprint_id, to_tvm_target(target_doc), self.tvm_version,
                       lambda state, detail: logger.info("%s: %s", state, detail))


class ClusterJobMoves:
    """The coordinator's job moves: the state, its status line, any extra field and the job's
    state_changed event in one unit of work of the cluster store; a tick comes early after a move
    that gives it work."""

    def __init__(self, cluster: ClusterStore, wake: threading.Event):
        self._cluster = cluster
        self._wake = wake

    def move(self, job_id: str, current: JobState, new: JobState, *, status: str,
             error: str | None, **fields: Any) -> bool:
        try:
            moved = self._cluster.jobs.move_job(job_id, current, new, utc_now(), status=status, error=error, **fields)
        except RegistryError:
            return False
        if moved is not None and new in (JobState.BUILDING, JobState.VALIDATING):
            self._wake.set()
        return moved is not None
