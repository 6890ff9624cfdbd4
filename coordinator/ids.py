"""The names the coordinator gives: a job's validation lease, a fingerprint's tracker key."""

from __future__ import annotations

_VALIDATION_SUFFIX = ".validation"


def validation_id(job_id: str) -> str:
    """A job's validation lease is named apart from its shards (`<job>.s<i>`)."""
    return f"{job_id}{_VALIDATION_SUFFIX}"


def job_of_validation(validation: str) -> str | None:
    return validation[: -len(_VALIDATION_SUFFIX)] if validation.endswith(_VALIDATION_SUFFIX) else None


def rpc_key(fingerprint_id: str) -> str:
    """The tracker key of a fingerprint's RPC servers: any of them can measure for it."""
    return f"farm-{fingerprint_id}"
