"""The coordinator's background tick: expire leases, bind, plan and build jobs, settle validations."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from coordinator import metrics
from coordinator.calls import DEFAULT_VALIDATION_RUNS, utc_now
from coordinator.client_calls import _fingerprint_of
from coordinator.cluster_store import (
    VALIDATION_DONE,
    VALIDATION_FAILED,
    VALIDATION_LEASED,
    VALIDATION_PENDING,
)
from coordinator.job_work import build_libraries, plan_tasks
from foundation.domain.jobs import JobState
from foundation.domain.shards import TaskCost, split_tasks
from foundation.errors import FarmError, NotFound, RegistryError
from foundation.job_driver.artifacts import LIBRARY_FORMAT, commit_artifact

logger = logging.getLogger("farm.coordinator")

VALIDATION_WARMUP = 3


class Housekeeping:
    """What the Coordinator (coordinator.service), which composes this part, does in the
    background: `tick` moves jobs along."""

    def tick(self, now: dt.datetime | None = None) -> None:
        """One round of housekeeping; the server runs it every fraction of a second."""
        now = now or utc_now()
        ttl, attempts = self.settings.lease_ttl, self.settings.max_attempts
        self.live.flush()  # the beats collected since the last tick, before judging silence
        for agent in self.cluster.mark_lost_agents(now, ttl):
            logger.info("agent %s (%s) missed its heartbeat TTL; its leases are re-queued", agent.id, agent.hostname)
        metrics.leases_expired("shard", self.cluster.expire_leases(now, ttl, attempts))
        metrics.leases_expired("validation", self.cluster.expire_validations(now, ttl, attempts))
        self._bind_waiting_jobs(now)
        for job in self.store.list_jobs(limit=500, state=JobState.QUEUED.value):
            if job.fingerprint_id is not None:
                self._planner.submit(job.id, lambda job_id=job.id: self._plan(job_id))
        for job_id in self.cluster.running_jobs_ready_to_build():
            self._move(job_id, JobState.RUNNING, JobState.BUILDING,
                       "building: compiling with the best records, and an untuned reference")
        for job in self.store.list_jobs(limit=500, state=JobState.BUILDING.value):
            # Also the builds a previous coordinator process did not finish.
            self._builder.submit(job.id, lambda job_id=job.id: self._build(job_id))
        for job in self.store.list_jobs(limit=500, state=JobState.VALIDATING.value):
            validation = self.cluster.get_validation(job.id)
            if validation is not None and validation.state in (VALIDATION_DONE, VALIDATION_FAILED):
                self._settle_validation(job.id)

    def _bind_waiting_jobs(self, now: dt.datetime) -> None:
        from foundation.hardware.targets import TUNABLE_KINDS, canonical_target, target_json

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
            # What leases hand out, converted now rather than while agents wait for it.
            for task in self.cluster.job_tasks(job.id):
                self._module_json_of(task.workload_id, task.mod_json)
        except Exception as err:
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
            from foundation.hardware.versions import software_versions

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
        except Exception as err:
            logger.exception("building %s failed", job_id)
            self._move(job_id, JobState.BUILDING, JobState.FAILED, "failed: the build failed",
                       error=f"build failed: {type(err).__name__}: {err}"[:2000])
            return
        self._move(job_id, JobState.BUILDING, JobState.VALIDATING, validating)

    def _settle_validation(self, job_id: str) -> None:
        """A validating job whose validation ended: commit the artifact, or fail the job."""
        from foundation.hardware.versions import software_versions
        from foundation.runtime.library_runner import Latency
        from foundation.runtime.validation import ValidationResult

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
                metrics.artifact_committed()
            self._move(job_id, JobState.VALIDATING, JobState.SUCCEEDED,
                       f"succeeded: validated on {result.get('agent_id')}, {artifact.latency_mean_ms:.3f} ms mean",
                       artifact_id=artifact.id)

    def _validation_library(self, job_id: str) -> bytes:
        """The library a validation checked (a claim hands it out only with its lease)."""
        library = self.cluster.validation_library(job_id)
        if library is None:
            raise NotFound(f"job {job_id} has no built library")
        return library

    def _move(self, job_id: str, current: JobState, new: JobState, status: str, *,
              error: str | None = None, **fields: Any) -> bool:
        """Move a job, guarded by the state it is expected in, with its state_changed event.

        False if the job had left ``current`` (cancelled meanwhile, or moved by another
        thread): the caller's step is then moot.
        """
        # One unit of work of the store's, so that the state, the status line, any extra
        # field and the event commit together.
        try:
            moved = self.cluster.move_job(job_id, current, new, utc_now(), status=status, error=error, **fields)
        except RegistryError:
            return False
        if moved is None:
            return False
        if new in (JobState.BUILDING, JobState.VALIDATING):
            self.wake.set()
        return True
