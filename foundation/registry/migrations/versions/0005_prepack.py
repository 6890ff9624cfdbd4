"""Artifacts say which form their weights take: plain, or prepacked at load time.

Revision ID: 0005_prepack
Revises: 0004_record_merge
Create Date: 2026-11-25

A prepacked CPU library (foundation.domain.weights_layout) was tuned on other TIR than the
plain one and is looked up apart from it: a submit for one form is never answered by an
artifact of the other. Artifacts made before this revision are plain.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_prepack"
down_revision = "0004_record_merge"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("weights_layout", sa.String(length=16), nullable=False, server_default="plain")
        )


def downgrade() -> None:
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_column("weights_layout")
