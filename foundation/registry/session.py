"""The one unit of work: a session, one transaction, commit or roll back, clear errors.

What a write changes is part of how it is opened, because the coordinator caches reads of
state and keeps each cache only while nothing it read can have changed
(coordinator.fleet.live_agents). This is the one place that contract is written down:

- ``UnitOfWork.state_version`` moves with every committed write unit that may have changed
  some state (a job, shard, agent or validation). A read cached with the version taken before
  it is good while the version is the same: the version moves only after a commit.
- ``UnitOfWork.lease_version(agent)`` is the same for one agent's shard leases, what that
  agent's heartbeat is checked against. A fleet leases and completes shards every few
  seconds; were each of those a reason to re-read every agent's lease list, no heartbeat
  would be answered from memory.

So every write unit says, when it is opened (`UnitOfWork.write`), what it may change
(`Changes`): nothing a cache keeps (records, events, heartbeat times), the shard leases of
the agents it names, or any state at all, every agent's leases included. A function that
changes shard leases within a unit takes its `WriteSession` (not a plain Session) and says
whose leases it changed (`WriteSession.changed_leases_of`), or that anyone's may have
(`WriteSession.may_have_changed_any_lease`, e.g. a job's shards cancelled).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .engine import WRITE_OPTION, registry_error


class Changes(enum.Enum):
    """What a write unit may change of the state the coordinator caches reads of."""

    # Records, events, heartbeat times: no version moves.
    NO_STATE = "no state"
    # The shard leases of the agents the unit names, and what follows from them (the shard's
    # job settled, its events): those agents' lease versions move. A unit that names no agent
    # changed nothing (a claim that found no shard to lease).
    LEASES = "leases"
    # Any state, every agent's leases included: every version moves.
    STATE = "state"


class WriteSession(Session):
    """The session of a write unit, which knows what the unit declared it changes (`Changes`)
    and, for Changes.LEASES, whose leases it changed."""

    changes: Changes = Changes.STATE
    _leases_of: set[str]
    _any_lease: bool

    def changed_leases_of(self, agent_ids: Iterable[str]) -> None:
        """These agents' shard leases changed (a claim granted them, a completion ended one)."""
        self._may_change_leases()
        self._leases_of.update(agent_ids)

    def may_have_changed_any_lease(self) -> None:
        """Any agent's shard leases may have changed (a job's unfinished shards cancelled), even
        if the unit named whose leases it changed before."""
        self._may_change_leases()
        self._any_lease = True

    def _may_change_leases(self) -> None:
        if self.changes is Changes.NO_STATE:
            raise ValueError("a unit of work opened with Changes.NO_STATE cannot change shard leases")

    def _declare(self, changes: Changes) -> None:
        self.changes = changes
        self._leases_of = set()
        self._any_lease = False

    def _changed_leases(self) -> frozenset[str] | None:
        """After commit: the agents whose lease versions move, None for every agent's (and an
        empty set when no version moves)."""
        if self.changes is Changes.NO_STATE:
            return frozenset()
        if self.changes is Changes.STATE or self._any_lease:
            return None
        return frozenset(self._leases_of)


class UnitOfWork:
    """Opens sessions on one engine, one transaction each: `read` for readers, `write` for
    writers, which differ only in how SQLite locks and in what the versions above say."""

    def __init__(self, engine: Engine, url: str):
        self._url = url
        self._version_lock = threading.Lock()
        self._state_version = 0
        self._lease_epoch = 0  # moved by units that may have changed any agent's leases
        self._agent_lease_versions: dict[str, int] = {}
        # expire_on_commit=False: entities are built inside the session anyway, and a
        # commit must not trigger reloads of rows nobody will read again.
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(**{WRITE_OPTION: True}), class_=WriteSession, expire_on_commit=False
        )

    @property
    def url(self) -> str:
        """The registry's URL, its password masked: what messages name."""
        return self._url

    @property
    def state_version(self) -> int:
        return self._state_version

    def lease_version(self, agent_id: str) -> tuple[int, int]:
        with self._version_lock:
            return self._lease_epoch, self._agent_lease_versions.get(agent_id, 0)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._transaction(self._read()) as session:
            yield session

    @contextmanager
    def write(self, changes: Changes) -> Iterator[WriteSession]:
        """A write unit that may change what ``changes`` says (the module's docstring)."""
        session: WriteSession = self._write()
        session._declare(changes)
        with self._transaction(session):
            yield session
        changed = session._changed_leases()
        if changed is not None and not changed:
            return
        with self._version_lock:
            self._state_version += 1
            if changed is None:
                self._lease_epoch += 1
            else:
                for agent_id in changed:
                    self._agent_lease_versions[agent_id] = self._agent_lease_versions.get(agent_id, 0) + 1

    @contextmanager
    def _transaction(self, session: Session) -> Iterator[Session]:
        try:
            with session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise registry_error(exc, self._url) from exc
        finally:
            session.close()
