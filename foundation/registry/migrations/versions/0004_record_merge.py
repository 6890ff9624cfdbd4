"""One record per trace and scope, every measurement of it kept and merged; the best by index.

Revision ID: 0004_record_merge
Revises: 0003
Create Date: 2026-11-25

A trace measured again in the same scope (another job, a retune, an imported log) was
dropped as a duplicate; now each later measurement is a row of `tuning_measurements` and is
merged into its record: `measurements` counts them, `mean_sec` becomes the mean over the
valid ones (`valid_measurements`). `measurement_digest` names the record's own first
measurement, so the same numbers sent again are not counted twice. The scope index gains
`id`, so the best records of a workload come in TVM's order (mean, then the order stored)
straight from the index. Existing records count as one measurement each.
"""

from __future__ import annotations

import hashlib
import json
import math

import sqlalchemy as sa
from alembic import op

revision = "0004_record_merge"
down_revision = "0003"
branch_labels = None
depends_on = None

_SCOPE = ["workload_id", "fingerprint_id", "target", "tvm_version", "mean_sec"]
_BATCH = 1000


def _measurement_digest(record_digest: str, run_secs) -> str:
    # A frozen copy of foundation.registry.tuning_records.measurement_digest.
    if run_secs is None:
        numbers = "null"
    else:
        numbers = "[" + ",".join(repr(float(v)) if math.isfinite(float(v)) else json.dumps(float(v))
                                 for v in run_secs) + "]"
    return hashlib.sha256(f"{record_digest}\x1f{numbers}".encode()).hexdigest()


def upgrade() -> None:
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("measurements", sa.Integer(), server_default="1", nullable=False))
        batch_op.add_column(sa.Column("valid_measurements", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("measurement_digest", sa.String(length=64), nullable=True))
        batch_op.drop_index("ix_tuning_records_scope_mean")
        batch_op.create_index("ix_tuning_records_scope_mean", [*_SCOPE, "id"], unique=False)
    op.execute("UPDATE tuning_records SET valid_measurements = 1 WHERE mean_sec IS NOT NULL")
    records = sa.table("tuning_records", sa.column("id", sa.BigInteger()), sa.column("record_digest", sa.String()),
                       sa.column("run_secs", sa.JSON()), sa.column("measurement_digest", sa.String()))
    connection = op.get_bind()
    last = 0
    while True:
        rows = connection.execute(
            sa.select(records.c.id, records.c.record_digest, records.c.run_secs)
            .where(records.c.id > last).order_by(records.c.id).limit(_BATCH)).all()
        if not rows:
            break
        connection.execute(
            records.update().where(records.c.id == sa.bindparam("row_id"))
            .values(measurement_digest=sa.bindparam("digest")),
            [{"row_id": i, "digest": _measurement_digest(d, secs)} for i, d, secs in rows])
        last = rows[-1][0]
    op.create_table(
        "tuning_measurements",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("record_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_secs", sa.JSON(), nullable=True),
        sa.Column("mean_sec", sa.Double(), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("measurement_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["record_id"], ["tuning_records.id"],
                                name=op.f("fk_tuning_measurements_record_id_tuning_records"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_measurements")),
        sa.UniqueConstraint("measurement_digest", name=op.f("uq_tuning_measurements_measurement_digest")),
    )
    with op.batch_alter_table("tuning_measurements", schema=None) as batch_op:
        batch_op.create_index("ix_tuning_measurements_record_id", ["record_id"], unique=False)


def downgrade() -> None:
    op.drop_table("tuning_measurements")
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.drop_index("ix_tuning_records_scope_mean")
        batch_op.create_index("ix_tuning_records_scope_mean", _SCOPE, unique=False)
        batch_op.drop_column("measurement_digest")
        batch_op.drop_column("valid_measurements")
        batch_op.drop_column("measurements")
