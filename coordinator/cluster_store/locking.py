"""The base of ClusterStore's parts: its unit of work, and the row locks taken in the lock order."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from foundation.errors import FarmError, NotFound
from foundation.registry.schema import AgentRow, JobRow, ShardRow
from foundation.registry.store import RegistryStore

# A claim that finds its candidate taken (another coordinator won) tries again this often
# before answering "no work now"; the agent asks again later anyway.
_CLAIM_TRIES = 4
_RACED = object()


class UnknownAgent(NotFound):
    """An agent id the coordinator does not know: the agent must register again."""


class AgentMismatch(FarmError):
    """An agent asked for work with a fingerprint other than the one it registered."""


class RowLocks:
    """The unit of work every part runs in, and the rows they lock (the lock order is in
    the package's docstring)."""

    def __init__(self, store: RegistryStore):
        self._store = store
        self._unit = store.unit_of_work
        self._postgres = store.dialect == "postgresql"
        self.url = store.url

    def __repr__(self) -> str:
        return f"ClusterStore({self.url!r})"

    def _lock_job(self, session: Session, job_id: str) -> JobRow:
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
            raise NotFound(f"no job {job_id!r} in the registry at {self.url}", "see `farm jobs list`")
        return row

    def _job_row(self, session: Session, job_id: str) -> JobRow:
        row = session.get(JobRow, job_id, populate_existing=True)
        if row is None:
            raise NotFound(f"no job {job_id!r} in the registry at {self.url}", "see `farm jobs list`")
        return row

    def _agent_row(self, session: Session, agent_id: str) -> AgentRow:
        row = session.get(AgentRow, agent_id)
        if row is None:
            raise UnknownAgent(
                f"agent {agent_id!r} is not registered with the coordinator at {self.url}",
                "register again",
            )
        return row

    def _claiming_agent(self, session: Session, agent_id: str, fingerprint_id: str) -> AgentRow:
        """The row of an agent asking for work, which must name the fingerprint it registered."""
        agent = self._agent_row(session, agent_id)
        if agent.fingerprint_id != fingerprint_id:
            raise AgentMismatch(
                f"agent {agent_id} registered fingerprint {agent.fingerprint_id}, "
                f"not {fingerprint_id}",
                "register again with this box's fingerprint",
            )
        return agent

    def _locked_shard(self, session: Session, shard_id: str) -> ShardRow | None:
        """The shard row, locked after its job row (the lock order)."""
        job_id = session.scalar(select(ShardRow.job_id).where(ShardRow.id == shard_id))
        if job_id is None:
            return None
        self._lock_job(session, job_id)
        return session.scalars(
            select(ShardRow)
            .where(ShardRow.id == shard_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).one_or_none()
