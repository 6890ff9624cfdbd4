"""Job runners and heartbeats, artifact invalidation, the tuning lock.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

Embedded jobs record the process that runs them (host, pid, its start time), a heartbeat and
a cancel request, so that a job whose runner died is failed on the next read and another
process can ask it to stop. Artifacts can be marked invalid (the stored bytes no longer match
their sha256), so that they are never a hit again. `tuning_locks` holds one row per scope
being tuned, so that two submits of the same model never tune it twice.

Jobs made before this revision have no runner: they are never judged dead (`farm cancel`
ends one that is stuck).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    # Only nullable columns are added: SQLite's batch copy keeps every existing row as it is.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("runner_host", sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column("runner_pid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("runner_started_at", sa.Double(), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", _time(), nullable=True))
        batch_op.add_column(sa.Column("cancel_requested_at", _time(), nullable=True))
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("invalidated_at", _time(), nullable=True))
        batch_op.add_column(sa.Column("invalid_reason", sa.Text(), nullable=True))
    op.create_table(
        "tuning_locks",
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("runner_host", sa.String(length=256), nullable=False),
        sa.Column("runner_pid", sa.Integer(), nullable=False),
        sa.Column("runner_started_at", sa.Double(), nullable=False),
        sa.Column("acquired_at", _time(), nullable=False),
        sa.Column("heartbeat_at", _time(), nullable=False),
        sa.PrimaryKeyConstraint("scope", name=op.f("pk_tuning_locks")),
    )


def downgrade() -> None:
    op.drop_table("tuning_locks")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_column("invalid_reason")
        batch_op.drop_column("invalidated_at")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("cancel_requested_at")
        batch_op.drop_column("heartbeat_at")
        batch_op.drop_column("runner_started_at")
        batch_op.drop_column("runner_pid")
        batch_op.drop_column("runner_host")
