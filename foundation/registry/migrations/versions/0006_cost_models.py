"""Cost models: an xgb model per fingerprint and TVM version, trained on its records.

Revision ID: 0006_cost_models
Revises: 0005_prepack
Create Date: 2026-11-25

A job's search starts from the cost model its fingerprint's past records trained instead of
an untrained one (issue 17, item 3). One row per (fingerprint, TVM version, kind), replaced as
it learns; the blob is the model in the farm's own format (no pickle).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_cost_models"
down_revision = "0005_prepack"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cost_models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint_id", sa.String(length=64), nullable=False),
        sa.Column("tvm_version", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("last_record_id", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("workloads", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["fingerprint_id"], ["fingerprints.id"],
                                name=op.f("fk_cost_models_fingerprint_id_fingerprints")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_models")),
        sa.UniqueConstraint("fingerprint_id", "tvm_version", "kind",
                            name=op.f("uq_cost_models_fingerprint_id_tvm_version_kind")),
    )


def downgrade() -> None:
    op.drop_table("cost_models")
