"""Artifact pins: the libraries `farm registry prune` must keep.

Revision ID: 0007_artifact_pins
Revises: 0006_cost_models
Create Date: 2026-12-10

A platform team pins the libraries it runs in production (`farm registry pin ART`), so that no
prune deletes them. A table of its own rather than a column of artifacts: a pin belongs to this
registry, and sync and packs copy artifacts' columns into other registries. Creating it copies
no artifact (a new column on SQLite may rebuild the table, BLOBs and all).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_artifact_pins"
down_revision = "0006_cost_models"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "artifact_pins",
        sa.Column("artifact_id", sa.String(length=64), nullable=False),
        sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["artifact_id"], ["artifacts.id"],
                                name=op.f("fk_artifact_pins_artifact_id_artifacts")),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_artifact_pins")),
    )


def downgrade() -> None:
    op.drop_table("artifact_pins")
