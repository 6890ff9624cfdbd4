"""Cluster: agents, job plans (tasks and shards), job events, validations; jobs may wait unbound.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

Jobs gain their target kind, the target as requested, a status line and the submit they
belong to; their fingerprint becomes nullable, since a job for a target kind no agent serves
yet waits queued with none.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _time() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    # On SQLite batch mode copies `jobs`; migrate._upgrade runs this with foreign keys off.
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("target_kind", sa.String(length=32), server_default="", nullable=False)
        )
        batch_op.add_column(sa.Column("target_request", sa.Text(), server_default="", nullable=False))
        batch_op.add_column(sa.Column("status", sa.Text(), server_default="", nullable=False))
        batch_op.add_column(sa.Column("parent_request", sa.String(length=64), nullable=True))
        batch_op.alter_column(
            "fingerprint_id", existing_type=sa.String(length=64), nullable=True
        )
        batch_op.create_index("ix_jobs_model_id_state", ["model_id", "state"], unique=False)
        batch_op.create_index("ix_jobs_parent_request", ["parent_request"], unique=False)
    _backfill_job_targets()

    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("fingerprint_id", sa.String(length=64), nullable=False),
        sa.Column("target_kinds", sa.JSON(), nullable=False),
        sa.Column("hostname", sa.String(length=256), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=False),
        sa.Column("tvm_version", sa.String(length=64), nullable=False),
        sa.Column("rpc_key", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("registered_at", _time(), nullable=False),
        sa.Column("last_heartbeat_at", _time(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["fingerprint_id"], ["fingerprints.id"], name=op.f("fk_agents_fingerprint_id_fingerprints")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
    )
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.create_index(
            "ix_agents_state_fingerprint_id", ["state", "fingerprint_id"], unique=False
        )

    op.create_table(
        "job_tasks",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("flop", sa.Double(), nullable=False),
        sa.Column("workload_shash", sa.String(length=32), nullable=False),
        sa.Column("mod_json", sa.Text(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("trials_budget", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_tasks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_job_tasks_workload_id_workloads")
        ),
        sa.PrimaryKeyConstraint("job_id", "index", name=op.f("pk_job_tasks")),
        sa.UniqueConstraint("job_id", "name", name=op.f("uq_job_tasks_job_id_name")),
    )

    op.create_table(
        "shards",
        sa.Column("id", sa.String(length=96), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=True),
        sa.Column("leased_at", _time(), nullable=True),
        sa.Column("heartbeat_deadline", _time(), nullable=True),
        sa.Column("task_indexes", sa.JSON(), nullable=False),
        sa.Column("cost", sa.Double(), nullable=False),
        sa.Column("trials_budget", sa.Integer(), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("failures", sa.JSON(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], name=op.f("fk_shards_agent_id_agents")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_shards_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shards")),
        sa.UniqueConstraint("job_id", "index", name=op.f("uq_shards_job_id_index")),
    )
    with op.batch_alter_table("shards", schema=None) as batch_op:
        batch_op.create_index("ix_shards_state_job_id", ["state", "job_id"], unique=False)
        batch_op.create_index("ix_shards_agent_id_state", ["agent_id", "state"], unique=False)

    op.create_table(
        "job_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index("ix_job_events_job_id_id", ["job_id", "id"], unique=False)

    op.create_table(
        "validations",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=True),
        sa.Column("leased_at", _time(), nullable=True),
        sa.Column("library", sa.LargeBinary(), nullable=False),
        sa.Column("library_sha256", sa.String(length=64), nullable=False),
        sa.Column("lib_format", sa.String(length=16), nullable=False),
        sa.Column("reference_library", sa.LargeBinary(), nullable=True),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("warmup", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("failures", sa.JSON(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_validations_agent_id_agents")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_validations_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_validations")),
    )
    with op.batch_alter_table("validations", schema=None) as batch_op:
        batch_op.create_index("ix_validations_state", ["state"], unique=False)


def _backfill_job_targets() -> None:
    """Jobs made before this revision: their kind is in their canonical target JSON."""
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String),
        sa.column("target", sa.Text),
        sa.column("target_kind", sa.String),
        sa.column("target_request", sa.Text),
    )
    bind = op.get_bind()
    for job_id, target in bind.execute(sa.select(jobs.c.id, jobs.c.target)).all():
        bind.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id)
            .values(target_kind=_kind_of(target), target_request=target)
        )


def _kind_of(target: str) -> str:
    # A copy of the rule in cluster_store, frozen here like the column types above.
    try:
        value = json.loads(target)
    except ValueError:
        return target.split()[0] if target.strip() else ""
    return str(value.get("kind", "")) if isinstance(value, dict) else ""


def downgrade() -> None:
    for table in ("validations", "job_events", "shards", "job_tasks", "agents"):
        op.drop_table(table)
    # Jobs that never got a fingerprint cannot exist under 0001.
    op.execute("DELETE FROM jobs WHERE fingerprint_id IS NULL")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_parent_request")
        batch_op.drop_index("ix_jobs_model_id_state")
        batch_op.alter_column(
            "fingerprint_id", existing_type=sa.String(length=64), nullable=False
        )
        batch_op.drop_column("parent_request")
        batch_op.drop_column("status")
        batch_op.drop_column("target_request")
        batch_op.drop_column("target_kind")
