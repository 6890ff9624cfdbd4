"""Cost models in the registry: one blob per fingerprint, TVM version and kind, replaced as it learns.

TVM-free: the blob's format and the training are foundation.meta_schedule.warm.cost_models'.
The blob is checked against its sha256 before anyone loads it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from foundation.clock import utc_now
from foundation.errors import RegistryError

from .entities import StoredRecord
from .schema import CostModelRow, TuningRecordRow
from .session import Changes


@dataclass(frozen=True)
class StoredCostModel:
    """A stored cost model's metadata; its blob stays in the database (`cost_model_blob`)."""

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


def find_cost_model(store, fingerprint_id: str, tvm_version: str, kind: str = "xgb") -> StoredCostModel | None:
    query = select(CostModelRow).where(CostModelRow.fingerprint_id == fingerprint_id,
                                       CostModelRow.tvm_version == tvm_version, CostModelRow.kind == kind)
    with store.unit_of_work.read() as session:
        row = session.scalars(query).one_or_none()
        return None if row is None else _entity(row)


def cost_model_by_id(store, model_id: int) -> StoredCostModel | None:
    with store.unit_of_work.read() as session:
        row = session.get(CostModelRow, model_id)
        return None if row is None else _entity(row)


def cost_model_blob(store, model: StoredCostModel) -> bytes:
    """The model's bytes, as the farm wrote them (RegistryError if they no longer match their sha256)."""
    with store.unit_of_work.read() as session:
        blob = session.scalar(select(CostModelRow.blob).where(CostModelRow.id == model.id))
    if blob is None or hashlib.sha256(blob).hexdigest() != model.sha256:
        raise RegistryError(f"the cost model of {model.fingerprint_id} (TVM {model.tvm_version}) in {store.url} "
                            "is missing or damaged", "it is retrained from the records after the next job")
    return bytes(blob)


def save_cost_model(store, fingerprint_id: str, tvm_version: str, kind: str, blob: bytes, last_record_id: int,
                    samples: int, workloads: int) -> StoredCostModel:
    """Store the model, replacing the fingerprint's previous one of this TVM version and kind."""
    values = {"last_record_id": last_record_id, "samples": samples, "workloads": workloads, "size": len(blob),
              "sha256": hashlib.sha256(blob).hexdigest(), "blob": blob, "updated_at": utc_now()}
    statement = store.insert_statement(CostModelRow).values(
        fingerprint_id=fingerprint_id, tvm_version=tvm_version, kind=kind, created_at=utc_now(), **values)
    statement = statement.on_conflict_do_update(index_elements=["fingerprint_id", "tvm_version", "kind"],
                                                set_=values)
    with store.unit_of_work.write(Changes.NO_STATE) as session:
        session.execute(statement)
    found = find_cost_model(store, fingerprint_id, tvm_version, kind)
    assert found is not None
    return found


def records_after(store, fingerprint_id: str, tvm_version: str, after_id: int, limit: int) -> list[StoredRecord]:
    """The fingerprint's records of this TVM version stored after ``after_id``, oldest first, at most ``limit``."""
    query = (select(TuningRecordRow)
             .where(TuningRecordRow.fingerprint_id == fingerprint_id, TuningRecordRow.tvm_version == tvm_version,
                    TuningRecordRow.id > after_id)
             .order_by(TuningRecordRow.id).limit(limit))
    with store.unit_of_work.read() as session:
        return [r.to_entity() for r in session.scalars(query)]
