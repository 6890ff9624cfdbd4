"""The registry's jobs without a coordinator: `farm jobs`, `farm status JOB`, `farm cancel JOB`.

Every read first fails the embedded jobs whose process is gone (foundation.job_driver.runners),
so nothing shows `running` forever. A cancel of a job running in another process asks that
process to stop (its heartbeat reads the request) and waits for it; a job with no live
runner to ask is ended here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from farm.job_document import job_document as shared_document
from foundation.clock import utc_now
from foundation.domain.job_spec import DISTRIBUTED, job_notes, job_spec
from foundation.domain.warm_start_use import job_warm_start
from foundation.errors import BadInput
from foundation.job_driver.artifacts import artifact_json
from foundation.job_driver.driver import JobDriver, RegistryJobMoves
from foundation.job_driver.runners import fail_dead_jobs, gone_reason
from foundation.registry.opening import open_store

if TYPE_CHECKING:  # pragma: no cover
    from foundation.registry.entities import Artifact, Job
    from foundation.registry.store import RegistryStore

POLL_S = 0.5


@dataclass
class RegistryJobs:
    store: "RegistryStore"

    @staticmethod
    def open(registry_option: str | None) -> "RegistryJobs":
        jobs = RegistryJobs(open_store(registry_option))
        fail_dead_jobs(jobs.store)
        return jobs

    def get(self, job_id: str) -> "Job":
        return self.store.get_job(job_id)

    def current(self, job_id: str) -> "Job":
        """``job_id`` as it is now; failed first if its process died since the last read."""
        fail_dead_jobs(self.store)
        return self.store.get_job(job_id)

    def list(self, limit: int, states: Iterable[str] = (), model_name: str | None = None) -> list["Job"]:
        """The newest jobs, in any of ``states`` (every state when empty), of models named ``model_name``."""
        return self.store.list_jobs(limit=limit, states=states, model_name=model_name)

    def cancel(self, job_id: str, wait: float) -> "Job":
        """Cancel ``job_id``; returns it as it is once it is final, or when ``wait`` runs out."""
        job = self.store.get_job(job_id)
        if job.state.is_final:
            return job
        if job.runner is None:
            if job_spec(job).mode == DISTRIBUTED:
                raise BadInput(f"job {job_id} is a coordinator's job", "cancel it with --coordinator HOST:PORT")
            # An embedded job from before runners were recorded: nobody is left to ask.
            JobDriver(RegistryJobMoves(self.store), job.id, job.state).cancel("cancelled by `farm cancel`")
            return self.store.get_job(job_id)
        self.store.runners.request_cancel(job_id, utc_now())
        deadline = time.monotonic() + wait
        while True:
            job = self.store.get_job(job_id)
            if job.state.is_final:
                return job
            if gone_reason(job.runner, job.heartbeat_at or job.created_at) is not None:
                fail_dead_jobs(self.store)
                return self.store.get_job(job_id)
            if time.monotonic() >= deadline:
                return job
            time.sleep(POLL_S)

    def document(self, job: "Job") -> dict:
        """A job as `farm status --json` shows it; the same fields as a coordinator's job."""
        model = self.store.get_model(job.model_id)
        artifact = self.store.get_artifact(job.artifact_id) if job.artifact_id else None
        return job_document(job, model.name if model else job.model_id, model.batch if model else None, artifact)


def job_document(job: "Job", model: str, batch: int | None, artifact: "Artifact | None") -> dict:
    """A registry's job as `farm jobs`, `farm status` and `farm submit` print it with --json, in the
    shape a coordinator's job has too (farm.job_document)."""
    notes = job_notes(job)
    return shared_document({
        "job": job.id,
        "state": job.state,
        "status": job.status,
        "cache_hit": job.cache_hit,
        "trials": job.trials_done,
        "trials_budget": job.trials_budget,
        "trial_errors": None,
        "trial_plan": notes.trial_plan.to_json() if notes.trial_plan else None,
        "fingerprint": job.fingerprint_id,
        "model": model,
        "batch": batch,
        "target": job.target,
        "target_kind": job.target_kind,
        "weights_layout": notes.weights_layout.value,
        "weights_layout_choice": notes.weights_layout_choice.to_json() if notes.weights_layout_choice else None,
        "shards": None,
        "failed_shards": [],
        "reuse": notes.reused.to_json() if notes.reused else None,
        "until": notes.until.to_json() if notes.until else None,
        "warm_start": job_warm_start(notes.warm_start_used),
        "error": job.error,
        "artifact": artifact_json(artifact) if artifact else None,
        "built_untuned": notes.built_untuned.to_json() if notes.built_untuned else None,
        "runner": job.runner.describe() if job.runner else None,
        "heartbeat_at": _iso(job.heartbeat_at),
        "cancel_requested": job.cancel_requested_at is not None,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "id": job.id,
        "model_id": job.model_id,
        "fingerprint_id": job.fingerprint_id,
        "trials_done": job.trials_done,
        "options": job.options,
        "artifact_id": job.artifact_id,
        "target_request": job.target_request,
        "parent_request": job.parent_request,
        "cancel_requested_at": _iso(job.cancel_requested_at),
    })


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None
