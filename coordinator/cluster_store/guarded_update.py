"""The one guarded UPDATE of a lease's row, a shard's or a validation's, one row at a time or
many in one statement.

foundation.domain decides a move from the row as it was read (its state and attempt); the
UPDATE applies it only while the row still holds that state and attempt, so a writer that lost
a race changes nothing and learns it from the row count.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, update
from sqlalchemy.orm import Session

from foundation.registry.entities import failures_json
from foundation.registry.schema import ShardRow, ValidationRow


def update_lease(
    session: Session,
    table: type[ShardRow] | type[ValidationRow],
    key: ColumnElement[bool],
    old: Any,
    new: Any,
    now: datetime,
    *,
    leased_at: datetime | None,
    **fields: Any,
) -> bool:
    """Write ``old -> new`` (stored and domain values with state, attempt, agent_id and failures)
    to the row ``key`` picks, guarded by ``old``'s state and attempt; False if another writer
    changed the row first. ``fields``: the table's own columns to set with it."""
    result = session.execute(
        update(table)
        .where(key, table.state == old.state.value, table.attempt == old.attempt)
        .values(
            state=new.state.value,
            attempt=new.attempt,
            agent_id=new.agent_id,
            leased_at=leased_at,
            failures=failures_json(old.failures, new.failures, now),
            updated_at=now,
            **fields,
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def update_leases(session: Session, table: type[ShardRow], changes: list[dict[str, Any]], **fields: Any) -> int:
    """`update_lease` for many shards' rows in one statement (one executemany round trip, as a
    claim of several shards makes): each change names its row (``row_id``), the state and
    attempt it was read in (``old_state``, ``old_attempt``) and the move (``new_state``,
    ``new_attempt``, ``agent``); ``fields`` are set on every row alike. Returns how many rows
    still held what was read (the others are unchanged)."""
    result = session.connection().execute(
        update(table)
        .where(table.id == bindparam("row_id"), table.state == bindparam("old_state"),
               table.attempt == bindparam("old_attempt"))
        .values(state=bindparam("new_state"), attempt=bindparam("new_attempt"), agent_id=bindparam("agent"), **fields),
        changes,
    )
    return result.rowcount  # type: ignore[attr-defined,no-any-return]
