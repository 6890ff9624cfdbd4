"""The steps that move a distributed job along: plan it, build it, settle its validation, each once.

Housekeeping (coordinator.housekeeping) runs plans and builds on background threads; a
validation is settled by the tick, or at once when an agent reports it (coordinator.calls.validations).
Every move of a job is guarded by the state it is expected in, so a step that lost a race
(a job cancelled meanwhile, a second coordinator thread) changes nothing.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from coordinator import metrics
from coordinator.background_worker import BackgroundWorker
from coordinator.built_untuned import note_built_untuned
from coordinator.cluster_store import ClusterStore
from coordinator.hints import WorkloadJson
from coordinator.job_rounds import JobRounds, tuned_in_rounds
from coordinator.job_work import build_libraries, plan_tasks
from coordinator.model_cache import ModelCache
from foundation.clock import utc_now
from foundation.domain.job_spec import job_options
from foundation.domain.jobs import JobState
from foundation.domain.shard_split import TaskCost, split_tasks
from foundation.domain.validations import ValidationState
from foundation.errors import FarmError, NotFound, RegistryError
from foundation.job_driver import steps
from foundation.job_driver.artifacts import LIBRARY_FORMAT
from foundation.job_driver.driver import JobDriver
from foundation.logs import logs_job
from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")

class JobSteps:
    """Plan, build and settle jobs of the registry; ``wake`` is set when a tick should come early."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, models: ModelCache, workloads: WorkloadJson,
                 tvm_version: str, wake: threading.Event, data_dir: Path):
        self._store = store
        self._moves = ClusterJobMoves(cluster)
        self._cluster = cluster
        self._models = models
        self._workloads = workloads
        self._tvm_version = tvm_version
        self._wake = wake
        self._settling = threading.Lock()
        self.rounds = JobRounds(store, cluster, models, workloads, tvm_version, data_dir, wake, self.move)
        # Training takes seconds to minutes of CPU: never on a gRPC handler or the tick.
        self._learner = BackgroundWorker("farm-learner")

    def close(self) -> None:
        self._learner.stop()

    @logs_job
    def plan(self, job_id: str) -> None:
        """Extract the job's tasks and split them into shards (queued -> running), once."""
        job = self._store.get_job(job_id)
        if job.state != JobState.QUEUED.value or job.fingerprint_id is None:
            return
        if tuned_in_rounds(job):
            self._plan_rounds(job)
            return
        try:
            model = self._store.get_model(job.model_id)
            stored = job_options(job)
            spec, form = stored.spec, stored.notes.weights_layout
            plan = plan_tasks(self._models.get(model), job.target, spec, form, store=self._store,
                              fingerprint_id=job.fingerprint_id, tvm_version=self._tvm_version)
            agents = self._cluster.agents.agents_matching(job.target_kind).get(job.fingerprint_id, 0)
            # No shard for a skipped task; a job with every task skipped goes on to its build. Shards
            # are balanced by planned trials, and each carries its tasks' plans.
            shards = split_tasks(job.id, [TaskCost(t.name, t.weight, t.flop, t.trials_budget) for t in plan.tasks],
                                 agents, plan.max_trials_global)
            self._store.update_job(job.id, expect_state=JobState.QUEUED.value, trials_budget=plan.max_trials_global,
                                   options=stored.noted(**_layout_notes(plan), reused=plan.reuse.summary(),
                                                        trial_plan=plan.trial_plan.to_json(),
                                                        warm_seeds=plan.seeds_json()).to_json())
            self._cluster.plans.add_job_plan(job.id, plan.tasks, shards, utc_now())
            # What leases hand out, converted now rather than while agents wait for it.
            for task in self._cluster.plans.job_tasks(job.id):
                self._workloads.of(task.workload_id, task.mod_json)
        except Exception as err:
            if self._store.get_job(job_id).state == JobState.QUEUED.value:
                logger.exception("planning %s failed", job_id)
                self.move(job_id, JobState.QUEUED, JobState.FAILED, "failed: could not extract tuning tasks",
                          error=f"planning failed: {type(err).__name__}: {err}"[:2000])
            return
        logger.info("job %s: %d tasks in %d shards, %d trials; %s", job_id, len(plan.tasks), len(shards),
                    plan.max_trials_global, plan.reuse.describe())
        self._wake.set()

    def _plan_rounds(self, job) -> None:
        try:
            self.rounds.plan_first(job)
        except Exception as err:
            if self._store.get_job(job.id).state == JobState.QUEUED.value:
                if not isinstance(err, FarmError):
                    logger.exception("planning %s failed", job.id)
                problem = (f"{err.problem} ({err.fix})" if isinstance(err, FarmError) and err.fix
                           else f"{type(err).__name__}: {err}")
                self.move(job.id, JobState.QUEUED, JobState.FAILED, "failed: could not set up its rounds",
                          error=f"planning failed: {problem}"[:2000])

    @logs_job
    def build(self, job_id: str) -> None:
        """Build the tuned library and the untuned reference, and offer them for validation."""
        job = self._store.get_job(job_id)
        if job.state != JobState.BUILDING.value:
            return
        validating = (f"validating: waiting for an agent of fingerprint {job.fingerprint_id} "
                      "to check and time the library")
        existing = self._cluster.validations.get_validation(job_id)
        if existing is not None and not existing.state.is_final:
            # Built before a restart; only the move was lost.
            self.move(job_id, JobState.BUILDING, JobState.VALIDATING, validating)
            return
        try:
            from foundation.hardware.versions import software_versions

            model = self._store.get_model(job.model_id)
            loaded = self._models.get(model)
            stored = job_options(job)
            built = build_libraries(self._store, loaded, job.target, job.fingerprint_id, self._tvm_version,
                                    software_versions(job.target_kind), stored.notes.weights_layout,
                                    library=self.rounds.take_library(job_id))
            note_built_untuned(self._store, job_id, loaded, self._tvm_version)
            if self._store.get_job(job_id).state != JobState.BUILDING.value:
                return  # cancelled while building
            # The validation step runs on an agent of the job's fingerprint, with the embedded mode's settings.
            settings = steps.validation_settings(stored.spec)
            self._cluster.validations.create_validation(
                job_id, library=built.library, lib_format=LIBRARY_FORMAT, reference_library=built.reference,
                inputs=[s.to_json() for s in loaded.inputs], weights=[s.to_json() for s in loaded.weights],
                seed=settings.seed, runs=settings.runs, warmup=settings.warmup, now=utc_now(),
            )
        except Exception as err:
            logger.exception("building %s failed", job_id)
            self.move(job_id, JobState.BUILDING, JobState.FAILED, "failed: the build failed",
                      error=f"build failed: {type(err).__name__}: {err}"[:2000])
            return
        self.move(job_id, JobState.BUILDING, JobState.VALIDATING, validating)

    @logs_job
    def settle_validation(self, job_id: str) -> None:
        """A validating job whose validation ended: commit the artifact, or fail the job."""
        from foundation.hardware.versions import software_versions

        with self._settling:
            job = self._store.get_job(job_id)
            validation = self._cluster.validations.get_validation(job_id)
            if job.state != JobState.VALIDATING.value or validation is None:
                return
            if validation.state is ValidationState.FAILED:
                reasons = "; ".join(f"attempt {f.attempt} on {f.agent_id}: {f.reason}" for f in validation.failures)
                self.move(job_id, JobState.VALIDATING, JobState.FAILED, "failed: the library could not be validated",
                          error=f"validation could not run: {reasons}"[:4000])
                return
            if validation.state is not ValidationState.DONE:
                return
            result = validation.result or {}
            check = steps.reported_check(result)
            failure = steps.failed_validation(check)
            if failure is not None:
                self.move(job_id, JobState.VALIDATING, JobState.FAILED, "failed: validation", error=failure)
                return
            artifact = next((a for a in self._store.list_artifacts(model_id=job.model_id,
                                                                   fingerprint_id=job.fingerprint_id)
                             if a.job_id == job_id), None)
            # An artifact committed before a restart is kept; the library is read from the validation.
            committed = steps.commit(self._store, job, check,
                                     lambda untuned: self._validation_library(job_id, reference=untuned),
                                     tvm_version=self._tvm_version, software=software_versions(job.target_kind),
                                     committed=artifact)
            if committed.new:
                metrics.artifact_committed()
            if self.move(job_id, JobState.VALIDATING, JobState.SUCCEEDED,
                         f"{committed.kept.status}, validated on {result.get('agent_id')}",
                         artifact_id=committed.artifact.id):
                # One learner per fingerprint at a time; a job ending meanwhile is learned by the
                # next refresh (it takes every record since the model's last).
                self._learner.submit(f"learn:{job.fingerprint_id}",
                                     lambda: self.learn(job.fingerprint_id, job.target))

    def learn(self, fingerprint_id: str, target_json: str) -> None:
        """Teach the fingerprint's stored cost model the records its agents reported, as the
        embedded mode does after a job: the next job's shards start from it."""
        import json

        from foundation.hardware.targets import to_tvm_target
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.meta_schedule.warm.job_start import learn_from_job

        target_doc = json.loads(target_json)
        install_lean_tensor_intrinsics(target_doc["kind"])
        learn_from_job(self._store, fingerprint_id, to_tvm_target(target_doc), self._tvm_version,
                       lambda state, detail: logger.info("%s: %s", state, detail))

    def _validation_library(self, job_id: str, reference: bool = False) -> bytes:
        """The library a validation checked, or its untuned build (a claim hands them out only with its lease)."""
        library = self._cluster.validations.validation_library(job_id, reference)
        if library is None:
            raise NotFound(f"job {job_id} has no built library")
        return library

    def move(self, job_id: str, current: JobState, new: JobState, status: str, *,
             error: str | None = None, **fields: Any) -> bool:
        """Move a job, guarded by the state it is expected in, with its state_changed event
        (foundation.job_driver: the same driver as the embedded mode's).

        False if the job had left ``current`` (cancelled meanwhile, or moved by another
        thread): the caller's step is then moot.
        """
        if not JobDriver(self._moves, job_id, current).advance(new, status, error=error, **fields):
            return False
        if new in (JobState.BUILDING, JobState.VALIDATING):
            self._wake.set()
        return True


def _layout_notes(plan) -> dict:
    """The form the planner chose and why (jobs submitted before the choice existed keep theirs)."""
    if plan.layout_choice is None:
        return {}
    return {"weights_layout": plan.layout_choice.chosen, "weights_layout_choice": plan.layout_choice.to_json()}


class ClusterJobMoves:
    """The coordinator's job moves: the state, its status line, any extra field and the job's
    state_changed event in one unit of work of the cluster store."""

    def __init__(self, cluster: ClusterStore):
        self._cluster = cluster

    def move(self, job_id: str, current: JobState, new: JobState, *, status: str,
             error: str | None, **fields: Any) -> bool:
        try:
            moved = self._cluster.jobs.move_job(job_id, current, new, utc_now(), status=status, error=error, **fields)
        except RegistryError:
            return False
        return moved is not None
