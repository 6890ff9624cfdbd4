"""A job's JSON document: one shape whoever holds the job, the registry (an embedded job) or a coordinator.

`farm jobs`, `farm status`, `farm wait`, `farm cancel` and `farm submit` print it with --json and
farm.Job reads it; farm.registry_jobs.job_document fills it from a registry's row, farm.client.job_json
from a coordinator's Job. What one side cannot know is null there: an embedded job has no
shards (its failed_shards an empty list) and counts no trial errors on its row; a coordinator's
job has no runner process, and its row's own fields (model_id, options, requests) stay in the
coordinator's registry.
"""

from __future__ import annotations

from typing import Any

KEYS = (
    "job", "state", "status", "cache_hit", "trials", "trials_budget", "trial_errors", "trial_plan",
    "fingerprint", "model", "batch", "target", "target_kind", "weights_layout", "weights_layout_choice",
    "shards", "failed_shards", "reuse", "until", "warm_start", "error", "artifact", "built_untuned",
    "runner", "heartbeat_at", "cancel_requested", "created_at", "started_at", "finished_at",
    # A registry row's names, which `farm jobs --json` printed before the document was one shape.
    "id", "model_id", "fingerprint_id", "trials_done", "options", "artifact_id", "target_request",
    "parent_request", "cancel_requested_at",
)


def job_document(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` in KEYS' order. A key left out or added is a bug in the caller, so that the two
    sides cannot drift apart unnoticed."""
    if values.keys() != set(KEYS):
        missing, extra = sorted(set(KEYS) - values.keys()), sorted(values.keys() - set(KEYS))
        raise ValueError(f"a job document lacks {missing} and has {extra} beyond farm.job_document.KEYS")
    return {key: values[key] for key in KEYS}
