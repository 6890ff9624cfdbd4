"""Empty registry databases for tests: on SQLite, and on the PostgreSQL server of FARM_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

POSTGRES_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def admin_url() -> str:
    url = make_url(POSTGRES_URL)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def fresh_postgres_database(admin: Any, template: str | None = None) -> tuple[str, Callable[[], None]]:
    """CREATE a uniquely named database, empty or a copy of the database ``template`` (which nothing
    may be connected to); returns its URL and a function that drops it."""
    name = f"farm_test_{secrets.token_hex(6)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    url = make_url(admin_url()).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    return url, drop


def database_name(url: str) -> str:
    return make_url(url).database


def cut_off(admin: Any, database: str) -> None:
    """The database stops taking connections, and loses the ones it had: as if its server died."""
    with admin.connect() as connection:
        connection.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
        connection.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :db"),
                           {"db": database})


def restore(admin: Any, database: str) -> None:
    with admin.connect() as connection:
        connection.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
