"""The one unit of work: a session, one transaction, commit or roll back, clear errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .engine import WRITE_OPTION, registry_error


UNCHANGED = "farm_unchanged"


def unchanged(session: Session) -> None:
    """Mark a write unit that changed no state: it leaves `UnitOfWork.state_version` alone."""
    session.info[UNCHANGED] = True


class UnitOfWork:
    """Opens sessions on one engine; readers and writers differ only in how SQLite locks.

    ``state_version`` counts the write transactions committed through it that may have
    changed the state of something (a job, shard, agent or validation). A cache of a state
    read is valid while the version is the one read before the read: the version moves only
    after a commit. Writes that change no state (records, events, heartbeat times) say
    ``quiet=True`` and leave it alone.
    """

    def __init__(self, engine: Engine, url: str):
        self._url = url
        self._version_lock = threading.Lock()
        self._state_version = 0
        # expire_on_commit=False: entities are built inside the session anyway, and a
        # commit must not trigger reloads of rows nobody will read again.
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )

    @property
    def state_version(self) -> int:
        return self._state_version

    @contextmanager
    def __call__(self, *, write: bool = False, quiet: bool = False) -> Iterator[Session]:
        session = (self._write if write else self._read)()
        try:
            with session.begin():
                yield session
            # A writer that found nothing to change says so (`unchanged`).
            quiet = quiet or session.info.get(UNCHANGED, False)
        except SQLAlchemyError as exc:
            raise registry_error(exc, self._url) from exc
        finally:
            session.close()
        if write and not quiet:
            with self._version_lock:
                self._state_version += 1
