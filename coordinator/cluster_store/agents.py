"""Agents in the cluster store: registration, heartbeats, and agents lost to silence."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, update

from foundation.registry.entities import Agent
from foundation.registry.schema import AgentRow
from foundation.registry.session import Changes, UnitOfWork

AGENT_ACTIVE = "active"
AGENT_LOST = "lost"

# PostgreSQL: many agents' beats in one statement, returning the ids it found.
_RECORD_BEATS = (
    f"UPDATE agents SET last_heartbeat_at = b.at, state = '{AGENT_ACTIVE}' "
    "FROM unnest(%b::text[], %b::timestamptz[]) AS b(id, at) WHERE agents.id = b.id RETURNING agents.id"
)


class AgentStore:
    """Registered agents, alive while they heartbeat."""

    def __init__(self, unit: UnitOfWork, *, postgres: bool):
        self._unit = unit
        self._postgres = postgres

    def register_agent(
        self,
        *,
        fingerprint_id: str,
        target_kinds: Sequence[str],
        hostname: str,
        address: str,
        tvm_version: str,
        rpc_key: str,
        details: dict[str, Any],
        now: datetime,
        previous_agent_id: str | None = None,
    ) -> Agent:
        """Register an agent; with a ``previous_agent_id`` still known, that id comes back
        active, so the leases it holds stay valid across a coordinator restart."""
        fields = {
            "fingerprint_id": fingerprint_id,
            "target_kinds": sorted(set(target_kinds)),
            "hostname": hostname,
            "address": address,
            "tvm_version": tvm_version,
            "rpc_key": rpc_key,
            "details": details,
            "state": AGENT_ACTIVE,
            "registered_at": now,
            "last_heartbeat_at": now,
        }
        with self._unit.write(Changes.STATE) as session:
            if previous_agent_id:
                result = session.execute(
                    update(AgentRow).where(AgentRow.id == previous_agent_id).values(**fields)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    return session.get_one(AgentRow, previous_agent_id).to_entity()
            row = AgentRow(id="agent-" + secrets.token_hex(6), **fields)
            session.add(row)
            session.flush()
            return row.to_entity()

    def heartbeat(self, agent_id: str, now: datetime) -> Agent | None:
        """Note that the agent is alive; None when the id is unknown (it must re-register).

        A lost agent that beats again is active again: its old leases were re-queued, and
        `reconcile_leases` tells it to drop them.
        """
        if not self.record_heartbeats({agent_id: now}):
            return None
        return self.get_agent(agent_id)

    def record_heartbeats(self, beats: Mapping[str, datetime]) -> set[str]:
        """Write many agents' latest heartbeat times in one transaction (the coordinator
        collects them in memory between ticks); returns the ids that were known."""
        if not beats:
            return set()
        # In no particular lock order on PostgreSQL: no other writer locks more than one
        # agent row (registration and `mark_lost_agents` update one at a time; foreign keys
        # take key-share locks, which a heartbeat's update does not conflict with).
        ordered = sorted(beats.items())
        # A beat changes no lease; an agent that was lost and beats again is only a
        # candidate for new work, which nothing caches.
        with self._unit.write(Changes.NO_STATE) as session:
            if self._postgres:
                # One statement over two arrays: with a thousand agents, one UPDATE per agent
                # per tick was a share of the coordinator's CPU of its own.
                known = session.connection().exec_driver_sql(
                    _RECORD_BEATS, ([agent_id for agent_id, _ in ordered], [beat for _, beat in ordered])
                ).scalars().all()
            else:
                statement = (
                    update(AgentRow)
                    .where(AgentRow.id == bindparam("agent"))
                    .values(last_heartbeat_at=bindparam("beat"), state=AGENT_ACTIVE)
                    .execution_options(synchronize_session=False)
                )
                rows = [{"agent": agent_id, "beat": beat} for agent_id, beat in ordered]
                session.connection().execute(statement, rows)
                known = session.scalars(select(AgentRow.id).where(AgentRow.id.in_(list(beats)))).all()
        return set(known)

    def mark_lost_agents(self, now: datetime, ttl: float) -> list[Agent]:
        """Active agents silent for longer than ``ttl``, now lost (their leases expire apart)."""
        cutoff = now - timedelta(seconds=ttl)
        silent = (
            select(AgentRow.id)
            .where(AgentRow.state == AGENT_ACTIVE, AgentRow.last_heartbeat_at < cutoff)
            .order_by(AgentRow.id)
        )
        # Almost every tick finds none: looked for first without a write unit, which SQLite
        # would give the whole database, and which would say that state may have changed.
        with self._unit.read() as session:
            if session.scalars(silent.limit(1)).first() is None:
                return []
        with self._unit.write(Changes.STATE) as session:
            ids = session.scalars(silent).all()
            lost = []
            for agent_id in ids:
                # Guarded: a heartbeat that landed meanwhile keeps the agent active.
                result = session.execute(
                    update(AgentRow)
                    .where(
                        AgentRow.id == agent_id,
                        AgentRow.state == AGENT_ACTIVE,
                        AgentRow.last_heartbeat_at < cutoff,
                    )
                    .values(state=AGENT_LOST)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    lost.append(session.get_one(AgentRow, agent_id, populate_existing=True).to_entity())
            return lost

    def get_agent(self, agent_id: str) -> Agent | None:
        with self._unit.read() as session:
            row = session.get(AgentRow, agent_id)
            return row.to_entity() if row else None

    def list_agents(self, target_kind: str | None = None, include_lost: bool = True) -> list[Agent]:
        query = select(AgentRow).order_by(AgentRow.registered_at, AgentRow.id)
        if not include_lost:
            query = query.where(AgentRow.state == AGENT_ACTIVE)
        with self._unit.read() as session:
            agents = [row.to_entity() for row in session.scalars(query)]
        # JSON containment is spelled differently per dialect; agents are few.
        return [a for a in agents if target_kind is None or target_kind in a.target_kinds]

    def agents_matching(self, target_kind: str) -> dict[str, int]:
        """Fingerprints with active agents of ``target_kind``, and how many agents each has."""
        counts: dict[str, int] = {}
        for agent in self.list_agents(target_kind, include_lost=False):
            counts[agent.fingerprint_id] = counts.get(agent.fingerprint_id, 0) + 1
        return dict(sorted(counts.items()))
