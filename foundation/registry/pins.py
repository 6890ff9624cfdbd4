"""Pinned artifacts: libraries a platform team runs, which no prune deletes (`farm registry pin`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select

from foundation.clock import utc_now
from foundation.errors import NotFound, quoted

from .schema import ArtifactPinRow, ArtifactRow
from .session import Changes, UnitOfWork


@dataclass(frozen=True)
class Pin:
    artifact_id: str
    pinned_at: datetime

    def to_json(self) -> dict:
        return {"artifact": self.artifact_id, "pinned_at": self.pinned_at.isoformat()}


class ArtifactPins:
    """The registry's pins (`RegistryStore.pins`), over its unit of work."""

    def __init__(self, unit: UnitOfWork, insert_statement: Callable):
        self._unit = unit
        self._insert = insert_statement

    def pin(self, artifact_id: str) -> tuple[Pin, bool]:
        """Pin an artifact; the pin, and whether it is new (pinning twice keeps the first)."""
        with self._unit.write(Changes.NO_STATE) as session:
            self._check_exists(session, artifact_id)
            # RETURNING says whether the row was added: the ORM session's row count did not, on PostgreSQL.
            added = session.scalar(
                self._insert(ArtifactPinRow).values(artifact_id=artifact_id, pinned_at=utc_now())
                .on_conflict_do_nothing(index_elements=["artifact_id"]).returning(ArtifactPinRow.artifact_id)
            )
            row = session.get_one(ArtifactPinRow, artifact_id, populate_existing=True)
            return Pin(row.artifact_id, row.pinned_at), added is not None

    def unpin(self, artifact_id: str) -> bool:
        """Unpin an artifact; whether it was pinned."""
        with self._unit.write(Changes.NO_STATE) as session:
            self._check_exists(session, artifact_id)
            removed = session.execute(delete(ArtifactPinRow).where(ArtifactPinRow.artifact_id == artifact_id)
                                      .execution_options(synchronize_session=False))
            return bool(removed.rowcount)  # type: ignore[attr-defined]

    def list(self) -> list[Pin]:
        with self._unit.read() as session:
            order = (ArtifactPinRow.pinned_at, ArtifactPinRow.artifact_id)
            rows = session.scalars(select(ArtifactPinRow).order_by(*order))
            return [Pin(r.artifact_id, r.pinned_at) for r in rows]

    def _check_exists(self, session, artifact_id: str) -> None:  # type: ignore[no-untyped-def]
        if session.scalar(select(ArtifactRow.id).where(ArtifactRow.id == artifact_id)) is None:
            raise NotFound(f"no artifact {quoted(artifact_id)} in the registry at {self._unit.url}",
                           "see `farm registry ls` for artifact ids")
