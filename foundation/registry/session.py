"""The one unit of work: a session, one transaction, commit or roll back, clear errors."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .engine import WRITE_OPTION, registry_error

UNCHANGED = "farm_unchanged"
LEASES_OF = "farm_leases_of"
ANY_LEASE = "farm_any_lease"


def unchanged(session: Session) -> None:
    """Mark a write unit that changed no state: it leaves `UnitOfWork.state_version` alone."""
    session.info[UNCHANGED] = True


def changes_leases_of(session: Session, agent_ids: Iterable[str]) -> None:
    """Mark a write unit whose shard changes are all leases of these agents (a claim, a
    completion): it moves their lease versions, not every agent's (`UnitOfWork.lease_version`)."""
    session.info.setdefault(LEASES_OF, set()).update(agent_ids)


def changes_any_lease(session: Session) -> None:
    """Mark a write unit that may change any agent's leases (cancelling a job's shards), even
    if another part of it said whose (`changes_leases_of`)."""
    session.info[ANY_LEASE] = True


class UnitOfWork:
    """Opens sessions on one engine; readers and writers differ only in how SQLite locks.

    ``state_version`` counts the write transactions committed through it that may have
    changed the state of something (a job, shard, agent or validation). A cache of a state
    read is valid while the version is the one read before the read: the version moves only
    after a commit. Writes that change no state (records, events, heartbeat times) say
    ``quiet=True`` and leave it alone.

    ``lease_version(agent)`` is the same for what one agent's heartbeat is checked against:
    it moves with every state change except those whose unit said which agents' leases alone
    they changed (`changes_leases_of`), which move only those agents'. A fleet leases and
    completes shards every few seconds; were each of those a reason to re-read every agent's
    lease list, no heartbeat would be answered from memory.
    """

    def __init__(self, engine: Engine, url: str):
        self._url = url
        self._version_lock = threading.Lock()
        self._state_version = 0
        self._lease_epoch = 0  # moved by state changes that did not say whose leases
        self._agent_lease_versions: dict[str, int] = {}
        # expire_on_commit=False: entities are built inside the session anyway, and a
        # commit must not trigger reloads of rows nobody will read again.
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )

    @property
    def state_version(self) -> int:
        return self._state_version

    def lease_version(self, agent_id: str) -> tuple[int, int]:
        with self._version_lock:
            return self._lease_epoch, self._agent_lease_versions.get(agent_id, 0)

    @contextmanager
    def __call__(self, *, write: bool = False, quiet: bool = False) -> Iterator[Session]:
        session = (self._write if write else self._read)()
        try:
            with session.begin():
                yield session
            # A writer that found nothing to change says so (`unchanged`).
            quiet = quiet or session.info.get(UNCHANGED, False)
            leases_of = None if session.info.get(ANY_LEASE) else session.info.get(LEASES_OF)
        except SQLAlchemyError as exc:
            raise registry_error(exc, self._url) from exc
        finally:
            session.close()
        if write and not quiet:
            with self._version_lock:
                self._state_version += 1
                if leases_of is None:
                    self._lease_epoch += 1
                else:
                    for agent_id in leases_of:
                        self._agent_lease_versions[agent_id] = self._agent_lease_versions.get(agent_id, 0) + 1
