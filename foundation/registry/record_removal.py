"""Tuning records removed on request (`farm registry forget`): found within one fingerprint, deleted in one transaction.

A record is what tuning learned, and retention never deletes one (foundation.registry.prune); this
removes those an operator names: records a hostile or broken agent filed, or a workload's or a
model's records, to tune them from nothing. Records are chosen by id, by workload, or by the
workloads of a model (those its coordinator jobs planned, and those its jobs measured records of),
always within one fingerprint; their later measurements go with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from sqlalchemy import delete, false, or_, select, union

from foundation.errors import NotFound

from .entities import StoredRecord
from .schema import JobRow, JobTaskRow, TuningMeasurementRow, TuningRecordRow, WorkloadRow
from .session import Changes, UnitOfWork

# Rows a read returns, and ids a statement binds: under SQLite's bound-parameter limit with room to spare.
BATCH = 500


@dataclass(frozen=True)
class RecordChoice:
    """Which of a fingerprint's records: those with one of ``record_ids``, of one of ``workload_ids``,
    or of a workload of one of ``model_ids``; with ``every``, all of them."""

    fingerprint_id: str
    record_ids: tuple[int, ...] = ()
    workload_ids: tuple[int, ...] = ()
    model_ids: tuple[str, ...] = ()
    every: bool = False


@dataclass(frozen=True)
class Removed:
    """What a removal deleted: records, and the later measurements merged into them."""

    records: int
    measurements: int


class RecordRemoval:
    """Finding and deleting tuning records of a fingerprint (`RegistryStore.record_removal`)."""

    def __init__(self, unit: UnitOfWork):
        self._unit = unit

    def chosen(self, choice: RecordChoice) -> Iterator[list[StoredRecord]]:
        """The chosen records, oldest first, a batch at a time (a fingerprint may hold millions).
        NotFound first for a record or workload id the registry does not have, or a record of
        another fingerprint, naming them."""
        with self._unit.read() as session:
            self._check_known(session, choice)
            # Read once: the query below runs again for every batch.
            workload_ids = sorted(set(choice.workload_ids) | (
                set(session.scalars(_model_workloads(choice.model_ids))) if choice.model_ids else set()))
        query = select(TuningRecordRow).where(TuningRecordRow.fingerprint_id == choice.fingerprint_id)
        if not choice.every:
            query = query.where(or_(
                TuningRecordRow.id.in_(choice.record_ids) if choice.record_ids else false(),
                TuningRecordRow.workload_id.in_(workload_ids) if workload_ids else false(),
            ))
        after = 0
        while True:
            with self._unit.read() as session:
                batch = [r.to_entity() for r in session.scalars(
                    query.where(TuningRecordRow.id > after).order_by(TuningRecordRow.id).limit(BATCH))]
            if not batch:
                return
            yield batch
            after = batch[-1].id

    def remove(self, record_ids: Iterable[int]) -> Removed:
        """Delete the records and their measurements in one transaction (a failure deletes none);
        ids already gone are skipped."""
        ids = sorted(set(record_ids))
        records = measurements = 0
        with self._unit.write(Changes.NO_STATE) as session:
            for start in range(0, len(ids), BATCH):
                chunk = ids[start:start + BATCH]
                # Not left to ON DELETE CASCADE, so that the count is known on either database.
                measurements += session.execute(
                    delete(TuningMeasurementRow).where(TuningMeasurementRow.record_id.in_(chunk))
                    .execution_options(synchronize_session=False)).rowcount  # type: ignore[attr-defined]
                records += session.execute(
                    delete(TuningRecordRow).where(TuningRecordRow.id.in_(chunk))
                    .execution_options(synchronize_session=False)).rowcount  # type: ignore[attr-defined]
        return Removed(records, measurements)

    def _check_known(self, session, choice: RecordChoice) -> None:  # type: ignore[no-untyped-def]
        if choice.workload_ids:
            known = set(session.scalars(select(WorkloadRow.id).where(WorkloadRow.id.in_(choice.workload_ids))))
            missing = sorted(set(choice.workload_ids) - known)
            if missing:
                raise NotFound(f"the registry has no workload {_listed(missing)}",
                               "workload ids are those a 'left out' warning or a refused report names; "
                               "nothing was removed")
        if choice.record_ids:
            owners = dict(session.execute(select(TuningRecordRow.id, TuningRecordRow.fingerprint_id)
                                          .where(TuningRecordRow.id.in_(choice.record_ids))).all())
            missing = sorted(set(choice.record_ids) - set(owners))
            if missing:
                raise NotFound(f"the registry has no tuning record {_listed(missing)}",
                               "record ids are those a 'left out' warning names; nothing was removed")
            strays = sorted(i for i, fingerprint_id in owners.items() if fingerprint_id != choice.fingerprint_id)
            if strays:
                raise NotFound(f"tuning record {_listed(strays)} is not of fingerprint {choice.fingerprint_id} "
                               f"but of {owners[strays[0]]}", f"give --fingerprint {owners[strays[0]]}; "
                               "nothing was removed")


def _model_workloads(model_ids: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """The workloads of the models' tasks: those their coordinator jobs planned (job_tasks) and
    those their jobs measured records of (an embedded job keeps no task rows)."""
    jobs = select(JobRow.id).where(JobRow.model_id.in_(model_ids))
    planned = select(JobTaskRow.workload_id).where(JobTaskRow.job_id.in_(jobs))
    # tuning_records.job_id has no index: a scan, for a command an operator runs now and then.
    measured = select(TuningRecordRow.workload_id).where(TuningRecordRow.job_id.in_(jobs))
    return union(planned, measured)


def _listed(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (f" (and {len(ids) - 10:,} more)" if len(ids) > 10 else "")
