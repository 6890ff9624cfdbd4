"""Foundation: fingerprints, workloads, tuning records, models, jobs and artifacts.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Migrations spell out their own column types instead of importing the ORM classes, so
editing `schema.py` later cannot change what this revision creates.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fingerprints",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fingerprints")),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("source_digest", sa.String(length=64), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("num_parameters", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.create_index(
            "ix_models_name_batch_source", ["name", "batch", "source_digest"], unique=False
        )

    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("shash", sa.String(length=32), nullable=False),
        sa.Column("mod_json", sa.Text(), nullable=False),
        sa.Column("mod_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("mod_sha256", name=op.f("uq_workloads_mod_sha256")),
    )
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.create_index("ix_workloads_shash", ["shash"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("fingerprint_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("trials_budget", sa.Integer(), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("artifact_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["fingerprint_id"],
            ["fingerprints.id"],
            name=op.f("fk_jobs_fingerprint_id_fingerprints"),
        ),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_jobs_model_id_models")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_created_at", ["created_at"], unique=False)

    op.create_table(
        "tuning_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("fingerprint_id", sa.String(length=64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("tvm_version", sa.String(length=64), nullable=False),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("trace", sa.Text(), nullable=False),
        sa.Column("args_info", sa.Text(), nullable=True),
        sa.Column("run_secs", sa.JSON(), nullable=True),
        sa.Column("mean_sec", sa.Double(), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("record_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["fingerprint_id"],
            ["fingerprints.id"],
            name=op.f("fk_tuning_records_fingerprint_id_fingerprints"),
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_tuning_records_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_records")),
        sa.UniqueConstraint("record_digest", name=op.f("uq_tuning_records_record_digest")),
    )
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tuning_records_scope_mean",
            ["workload_id", "fingerprint_id", "target", "tvm_version", "mean_sec"],
            unique=False,
        )

    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("fingerprint_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("library", sa.LargeBinary(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("lib_format", sa.String(length=16), nullable=False),
        sa.Column("latency_mean_ms", sa.Double(), nullable=False),
        sa.Column("latency_median_ms", sa.Double(), nullable=False),
        sa.Column("latency_std_ms", sa.Double(), nullable=False),
        sa.Column("untuned_latency_mean_ms", sa.Double(), nullable=True),
        sa.Column("validation", sa.JSON(), nullable=False),
        sa.Column("validation_passed", sa.Boolean(), nullable=False),
        sa.Column("tvm_version", sa.String(length=64), nullable=False),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["fingerprint_id"],
            ["fingerprints.id"],
            name=op.f("fk_artifacts_fingerprint_id_fingerprints"),
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_artifacts_job_id_jobs")),
        sa.ForeignKeyConstraint(
            ["model_id"], ["models.id"], name=op.f("fk_artifacts_model_id_models")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_artifacts_lookup",
            ["model_id", "target", "fingerprint_id", "tvm_version", "created_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index("ix_artifacts_lookup")

    op.drop_table("artifacts")
    with op.batch_alter_table("tuning_records", schema=None) as batch_op:
        batch_op.drop_index("ix_tuning_records_scope_mean")

    op.drop_table("tuning_records")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_created_at")

    op.drop_table("jobs")
    with op.batch_alter_table("workloads", schema=None) as batch_op:
        batch_op.drop_index("ix_workloads_shash")

    op.drop_table("workloads")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_index("ix_models_name_batch_source")

    op.drop_table("models")
    op.drop_table("fingerprints")
