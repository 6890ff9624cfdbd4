"""The best records of each workload on each fingerprint: where seeds for other workloads come from.

Read-only and TVM-free: which of these donors share a structure with a new workload, and
whether their traces apply to it, is decided by foundation.meta_schedule.warm.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select

from .schema import TuningRecordRow
from .session import UnitOfWork


@dataclass(frozen=True)
class DonorRecord:
    """One of the fastest measured records of a workload on a fingerprint."""

    workload_id: int
    fingerprint_id: str
    target: str
    trace: str
    mean_sec: float
    id: int = 0  # the record's id in the registry


class DonorRecords:
    """The registry's records as donors for warm starts (`RegistryStore.donors`), over its unit of work."""

    def __init__(self, unit: UnitOfWork):
        self._unit = unit

    def best_per_workload(self, tvm_version: str, per_workload: int,
                          fingerprint_ids: Iterable[str] | None = None) -> list[DonorRecord]:
        """The ``per_workload`` fastest valid records of every workload, per fingerprint and target,
        of one TVM version (traces of another version need not replay). Ordered by workload,
        fingerprint, then fastest first.

        One pass over the version's valid records (the scope index serves it): fine for the
        registries of tens of thousands of records this is used with; a fleet-sized registry would
        keep a per-workload best table instead.
        """
        rank = func.row_number().over(
            partition_by=(TuningRecordRow.workload_id, TuningRecordRow.fingerprint_id, TuningRecordRow.target),
            order_by=(TuningRecordRow.mean_sec, TuningRecordRow.id),
        ).label("rank")
        ranked = select(
            TuningRecordRow.workload_id, TuningRecordRow.fingerprint_id, TuningRecordRow.target,
            TuningRecordRow.trace, TuningRecordRow.mean_sec, TuningRecordRow.id, rank,
        ).where(TuningRecordRow.tvm_version == tvm_version, TuningRecordRow.mean_sec.is_not(None))
        if fingerprint_ids is not None:
            ranked = ranked.where(TuningRecordRow.fingerprint_id.in_(list(fingerprint_ids)))
        inner = ranked.subquery()
        query = (select(inner.c.workload_id, inner.c.fingerprint_id, inner.c.target, inner.c.trace, inner.c.mean_sec,
                        inner.c.id)
                 .where(inner.c.rank <= per_workload)
                 .order_by(inner.c.workload_id, inner.c.fingerprint_id, inner.c.mean_sec))
        with self._unit.read() as session:
            return [DonorRecord(*row) for row in session.execute(query)]

    def by_id(self, record_ids: Iterable[int]) -> dict[int, DonorRecord]:
        """The valid records among ``record_ids``, by id: the seeds a coordinator chose when it planned
        a job, read back when it leases the job's shards (a record gone since is simply absent)."""
        ids = sorted(set(record_ids))
        if not ids:
            return {}
        query = select(TuningRecordRow.workload_id, TuningRecordRow.fingerprint_id, TuningRecordRow.target,
                       TuningRecordRow.trace, TuningRecordRow.mean_sec, TuningRecordRow.id).where(
            TuningRecordRow.id.in_(ids), TuningRecordRow.mean_sec.is_not(None))
        with self._unit.read() as session:
            return {row.id: DonorRecord(*row) for row in session.execute(query)}
