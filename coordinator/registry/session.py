"""The one unit of work: a session, one transaction, commit or roll back, clear errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .engine import WRITE_OPTION, registry_error


class UnitOfWork:
    """Opens sessions on one engine; readers and writers differ only in how SQLite locks."""

    def __init__(self, engine: Engine, url: str):
        self._url = url
        # expire_on_commit=False: entities are built inside the session anyway, and a
        # commit must not trigger reloads of rows nobody will read again.
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False
        )

    @contextmanager
    def __call__(self, *, write: bool = False) -> Iterator[Session]:
        session = (self._write if write else self._read)()
        try:
            with session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise registry_error(exc, self._url) from exc
        finally:
            session.close()
