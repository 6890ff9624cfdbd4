"""Cost models in the registry: one blob per fingerprint, TVM version and kind, replaced as it learns.

TVM-free: the blob's format and the training are foundation.meta_schedule.warm.cost_models'.
The blob is checked against its sha256 before anyone loads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from foundation.clock import utc_now
from foundation.errors import RegistryError

from .entities import StoredRecord
from .schema import CostModelRow, TuningRecordRow
from .session import Changes, UnitOfWork


@dataclass(frozen=True)
class StoredCostModel:
    """A stored cost model's metadata; its blob stays in the database (`CostModels.blob`)."""

    id: int
    fingerprint_id: str
    tvm_version: str
    kind: str
    last_record_id: int  # the newest tuning record it learned from
    samples: int
    workloads: int
    size: int
    sha256: str
    updated_at: datetime


def _entity(row: CostModelRow) -> StoredCostModel:
    return StoredCostModel(row.id, row.fingerprint_id, row.tvm_version, row.kind, row.last_record_id, row.samples,
                           row.workloads, row.size, row.sha256, row.updated_at)


class CostModels:
    """The registry's cost models (`RegistryStore.cost_models`), over its unit of work."""

    def __init__(self, unit: UnitOfWork, insert_statement: Callable):
        self._unit = unit
        self._insert_statement = insert_statement

    def find(self, fingerprint_id: str, tvm_version: str, kind: str = "xgb") -> StoredCostModel | None:
        query = select(CostModelRow).where(CostModelRow.fingerprint_id == fingerprint_id,
                                           CostModelRow.tvm_version == tvm_version, CostModelRow.kind == kind)
        with self._unit.read() as session:
            row = session.scalars(query).one_or_none()
            return None if row is None else _entity(row)

    def of_kind(self, tvm_version: str, kind: str) -> list[StoredCostModel]:
        """Every fingerprint's model of this TVM version and kind, the most recently updated first
        (a model trained across fingerprints is found this way, whichever row holds it)."""
        query = (select(CostModelRow).where(CostModelRow.tvm_version == tvm_version, CostModelRow.kind == kind)
                 .order_by(CostModelRow.updated_at.desc(), CostModelRow.id.desc()))
        with self._unit.read() as session:
            return [_entity(row) for row in session.scalars(query)]

    def by_id(self, model_id: int) -> StoredCostModel | None:
        with self._unit.read() as session:
            row = session.get(CostModelRow, model_id)
            return None if row is None else _entity(row)

    def blob(self, model: StoredCostModel) -> bytes:
        """The model's bytes, as the farm wrote them (RegistryError if they no longer match their sha256)."""
        with self._unit.read() as session:
            blob = session.scalar(select(CostModelRow.blob).where(CostModelRow.id == model.id))
        if blob is None or hashlib.sha256(blob).hexdigest() != model.sha256:
            raise RegistryError(f"the cost model of {model.fingerprint_id} (TVM {model.tvm_version}) in "
                                f"{self._unit.url} is missing or damaged",
                                "it is retrained from the records after the next job")
        return bytes(blob)

    def save(self, fingerprint_id: str, tvm_version: str, kind: str, blob: bytes, last_record_id: int,
             samples: int, workloads: int) -> StoredCostModel:
        """Store the model, replacing the fingerprint's previous one of this TVM version and kind."""
        values = {"last_record_id": last_record_id, "samples": samples, "workloads": workloads, "size": len(blob),
                  "sha256": hashlib.sha256(blob).hexdigest(), "blob": blob, "updated_at": utc_now()}
        statement = self._insert_statement(CostModelRow).values(
            fingerprint_id=fingerprint_id, tvm_version=tvm_version, kind=kind, created_at=utc_now(), **values)
        statement = statement.on_conflict_do_update(index_elements=["fingerprint_id", "tvm_version", "kind"],
                                                    set_=values)
        with self._unit.write(Changes.NO_STATE) as session:
            session.execute(statement)
        found = self.find(fingerprint_id, tvm_version, kind)
        assert found is not None
        return found

    def newest_record_id(self, tvm_version: str, fingerprint_kind: str) -> int:
        """The id of the newest record of this TVM version on any fingerprint of the kind (cpu,
        cuda), 0 when none: whether records arrived since a model trained across fingerprints
        learned, without reading them."""
        query = select(func.max(TuningRecordRow.id)).where(
            TuningRecordRow.tvm_version == tvm_version, TuningRecordRow.fingerprint_id.like(f"{fingerprint_kind}-%"))
        with self._unit.read() as session:
            return int(session.scalar(query) or 0)

    def records_after(self, fingerprint_id: str, tvm_version: str, after_id: int, limit: int) -> list[StoredRecord]:
        """The fingerprint's records of this TVM version stored after ``after_id``, oldest first, at most ``limit``."""
        query = (select(TuningRecordRow)
                 .where(TuningRecordRow.fingerprint_id == fingerprint_id, TuningRecordRow.tvm_version == tvm_version,
                        TuningRecordRow.id > after_id)
                 .order_by(TuningRecordRow.id).limit(limit))
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]
