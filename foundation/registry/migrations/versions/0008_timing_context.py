"""Each tuning record names the cache state its schedule was timed in, and is ranked only beside
records timed in the same one.

Revision ID: 0008_timing_context
Revises: 0007_artifact_pins
Create Date: 2026-12-04

A record timed with its weights flushed (``weights``) reads slower than the same schedule timed
back to back (``warm``): ranked together, the warm ones win whether or not they run faster in the
model (foundation.domain.timing_context). The context becomes part of a record's scope, as the
target is: the scope index gains it, so that "the best records of W timed in C" stays one range of
the index. Every record stored before was timed warm, TVM's default and the farm's until then (a
run under FARM_TIMING_CONTEXT is the exception, and nothing recorded it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_timing_context"
down_revision = "0007_artifact_pins"
branch_labels = None
depends_on = None

_SCOPE_BEFORE = ["workload_id", "fingerprint_id", "target", "tvm_version", "mean_sec", "id"]
_SCOPE = ["workload_id", "fingerprint_id", "target", "tvm_version", "timing_context", "mean_sec", "id"]


def upgrade() -> None:
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("timing_context", sa.String(length=16), server_default="warm", nullable=False))
        batch_op.drop_index("ix_tuning_records_scope_mean")
        batch_op.create_index("ix_tuning_records_scope_mean", _SCOPE, unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.drop_index("ix_tuning_records_scope_mean")
        batch_op.create_index("ix_tuning_records_scope_mean", _SCOPE_BEFORE, unique=False)
        batch_op.drop_column("timing_context")
