"""What a job left in the registry, counted the way the registry keeps it."""

from __future__ import annotations

from foundation.registry.store import RegistryStore


def measurements_by_job(store: RegistryStore, job_id: str) -> int:
    """How many measurements ``job_id`` committed: a trace it measured twice (rounds of one job
    can meet the same schedule again) is one record holding two measurements."""
    records = store.records
    return sum(1 for record in records.all_records() for *_, job in records.measurements_of(record.id) if job == job_id)
