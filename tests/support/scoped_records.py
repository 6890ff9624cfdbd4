"""Registry records of one scope (fingerprint, target, TVM version) without TVM: for tests of how records
are stored, merged and ranked."""

from __future__ import annotations

from foundation.registry import NewRecord, RegistryStore

TARGET = '{"kind":"llvm"}'
SCOPE = ("cpu-aaaa", TARGET, "0.27.0")


def scoped_workload(store: RegistryStore) -> int:
    """A workload (its module text a stand-in: nothing here parses it), with the scope's fingerprint."""
    store.upsert_fingerprint(SCOPE[0], "cpu", "test cpu", {})
    return store.records.commit_workload("123", '["123","bW9k"]')


def scoped_record(workload_id: int, trace: str, run_secs, job_id=None, **more) -> NewRecord:  # type: ignore[no-untyped-def]
    """A measurement of ``trace`` (JSON text) of the workload, in the scope."""
    return NewRecord(workload_id=workload_id, fingerprint_id=SCOPE[0], target=SCOPE[1], tvm_version=SCOPE[2],
                     trace=trace, run_secs=run_secs, job_id=job_id, **more)
