"""The coordinator's calls on validation leases: a built library leased to an agent, and what it found."""

from __future__ import annotations

import threading
from collections.abc import Callable

from coordinator.cluster_store import ClusterStore
from coordinator.fleet import LiveAgents
from coordinator.ids import job_of_validation, validation_id
from coordinator.model_cache import ModelCache
from coordinator.values import ShardOutcome, ValidationOffer, ValidationReport
from foundation.clock import utc_now
from foundation.registry.store import RegistryStore


class ValidationCalls:
    """LeaseValidation and ReportValidation (over FarmAgent); a reported validation is settled
    at once by ``settle`` (coordinator.job_site.CoordinatorJobs.settle)."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, live: LiveAgents, models: ModelCache, *,
                 settle: Callable[[str], None], max_attempts: int, draining: threading.Event):
        self._store = store
        self._cluster = cluster
        self._live = live
        self._models = models
        self._settle = settle
        self._max_attempts = max_attempts
        self._draining = draining

    def may_offer_validation(self, agent_id: str, fingerprint_id: str) -> bool:
        """False when surely no validation waits for this agent, answered from memory without
        waiting on the registry (the server's event loop asks, for every idle poll); True when
        `lease_validation` is worth a try, or must say what is wrong with the agent."""
        if self._draining.is_set():
            return False
        known = self._live.cached(agent_id)
        if known is None or known.fingerprint_id != fingerprint_id:
            return True
        return self._live.may_have_work(fingerprint_id, known.target_kinds, wait=False, work="validation")

    def lease_validation(self, agent_id: str, fingerprint_id: str) -> ValidationOffer | None:
        if self._draining.is_set():
            return None
        lease = self._cluster.validations.claim_validation(agent_id, fingerprint_id, utc_now())
        if lease is None:
            return None
        weights = []
        model = self._store.get_model(lease.job.model_id)
        if model is not None and model.source == "onnx":
            weights = list(self._models.get(model).make_weights(lease.validation.seed))
        return ValidationOffer(lease, validation_id(lease.job.id), weights)

    def report_validation(self, agent_id: str, validation: str, attempt: int,
                          report: ValidationReport) -> ShardOutcome:
        job_id = job_of_validation(validation)
        if job_id is None or self._cluster.validations.get_validation(job_id) is None:
            return ShardOutcome(False, f"validation {validation} is unknown")
        now = utc_now()
        if report.error or report.check is None or report.latency is None:
            change = self._cluster.validations.fail_validation(
                job_id, attempt, agent_id, report.error or "the agent reported no outcome", now, self._max_attempts)
        else:
            result = {
                "agent_id": agent_id,
                "validation": report.check.to_json(),
                "latency": _latency_json(report.latency),
                "untuned_latency": _latency_json(report.untuned_latency) if report.untuned_latency else None,
            }
            change = self._cluster.validations.finish_validation(job_id, attempt, agent_id, result, now)
        if change.accepted:
            self._settle(job_id)
        return ShardOutcome(change.accepted, change.reason or "")


def _latency_json(latency) -> dict:
    return {"mean_ms": latency.mean_ms, "median_ms": latency.median_ms, "std_ms": latency.std_ms,
            "runs": latency.runs, "warmup": latency.warmup}
