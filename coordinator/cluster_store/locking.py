"""The rows the cluster's stores lock, in the lock order, and the errors of an agent that must register."""

from __future__ import annotations

import hashlib

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from foundation.errors import FarmError, NotFound
from foundation.registry.schema import AgentRow, JobRow, ShardRow


class UnknownAgent(NotFound):
    """An agent id the coordinator does not know: the agent must register again."""


class AgentMismatch(FarmError):
    """An agent asked for work with a fingerprint other than the one it registered."""


class RowLocks:
    """Reads of the rows several stores change, locked where a change follows. The lock order
    (coordinator.cluster_store): a job's row first, then its shard or validation rows."""

    def __init__(self, url: str):
        self.url = url  # named in errors

    def lock_job(self, session: Session, job_id: str) -> JobRow:
        """The job row, locked until commit (SQLite: the whole database already is).

        FOR NO KEY UPDATE: inserts of rows referencing the job (events, records) need not
        wait for it, only other writers of the job itself.
        """
        row = session.scalars(
            select(JobRow)
            .where(JobRow.id == job_id)
            .with_for_update(key_share=True)
            .execution_options(populate_existing=True)
        ).one_or_none()
        if row is None:
            raise self.no_job(job_id)
        return row

    def lock_equal_jobs(self, session: Session, key: str) -> None:
        """Hold, until commit, the lock of the jobs equal under ``key`` (one model, target,
        fingerprint and form): one submit at a time looks for such a job and makes one.

        PostgreSQL: a transaction-level advisory lock on the key's hash (a collision only
        serializes two submits). SQLite: the write transaction holds the whole database already
        (BEGIN IMMEDIATE, foundation.registry.engine).
        """
        if session.get_bind().dialect.name != "postgresql":
            return
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": digest})

    def job_row(self, session: Session, job_id: str) -> JobRow:
        row = session.get(JobRow, job_id, populate_existing=True)
        if row is None:
            raise self.no_job(job_id)
        return row

    def no_job(self, job_id: str) -> NotFound:
        return NotFound(f"no job {job_id!r} in the registry at {self.url}", "see `farm jobs` for the jobs it has")

    def unknown_agent(self, agent_id: str) -> UnknownAgent:
        return UnknownAgent(f"agent {agent_id!r} is not registered with the coordinator at {self.url}",
                            "register again")

    def claiming_agent(self, session: Session, agent_id: str, fingerprint_id: str) -> AgentRow:
        """The row of an agent asking for work, which must name the fingerprint it registered."""
        agent = session.get(AgentRow, agent_id)
        if agent is None:
            raise self.unknown_agent(agent_id)
        if agent.fingerprint_id != fingerprint_id:
            raise agent_mismatch(agent_id, agent.fingerprint_id, fingerprint_id)
        return agent

    def locked_shard(self, session: Session, shard_id: str) -> ShardRow | None:
        """The shard row, locked after its job row (the lock order)."""
        job_id = session.scalar(select(ShardRow.job_id).where(ShardRow.id == shard_id))
        if job_id is None:
            return None
        self.lock_job(session, job_id)
        return session.scalars(
            select(ShardRow)
            .where(ShardRow.id == shard_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()


def agent_mismatch(agent_id: str, registered: str, asked: str) -> AgentMismatch:
    return AgentMismatch(f"agent {agent_id} registered fingerprint {registered}, not {asked}",
                         "register again with this box's fingerprint")
