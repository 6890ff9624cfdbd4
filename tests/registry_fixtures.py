"""Fixtures for registry tests: one empty registry per test, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from coordinator.registry import RegistryStore

POSTGRES_URL = os.environ.get("FARM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _admin_url() -> str:
    url = make_url(POSTGRES_URL)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Any]:
    """An AUTOCOMMIT engine on the server's maintenance database, or a skip."""
    engine = create_engine(
        _admin_url(), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        engine.dispose()
        pytest.skip(
            f"PostgreSQL not reachable at {make_url(POSTGRES_URL).render_as_string()}: "
            f"{str(exc.orig).splitlines()[0]}; set FARM_TEST_POSTGRES_URL"
        )
    yield engine
    engine.dispose()


def fresh_postgres_database(admin: Any) -> tuple[str, Callable[[], None]]:
    """CREATE a uniquely named database; returns its URL and a function that drops it."""
    name = f"farm_test_{secrets.token_hex(6)}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(_admin_url()).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    return url, drop


@pytest.fixture(params=BACKENDS)
def registry_url(request, tmp_path) -> Iterator[str]:
    """The URL of an empty database (no schema yet) on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry' / 'registry.db'}"
        return
    admin = request.getfixturevalue("postgres_admin")
    url, drop = fresh_postgres_database(admin)
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def store(registry_url) -> Iterator[RegistryStore]:
    registry = RegistryStore(registry_url)
    try:
        yield registry
    finally:
        registry.dispose()


# -- TVM objects for database tests (TVM imported lazily: store tests do not need it) --


def matmul_module(n: int = 64):  # type: ignore[no-untyped-def]
    """A one-block TIR matmul, the smallest thing MetaSchedule would tune."""
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="matmul")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def split_trace(mod, factor: int):  # type: ignore[no-untyped-def]
    """A schedule trace that splits the outer loop by ``factor``: distinct per factor."""
    import tvm

    sch = tvm.s_tir.Schedule(mod)
    i, _j, _k = sch.get_loops(sch.get_sblock("matmul"))
    sch.split(i, [None, factor])
    return sch.trace


def tuning_record(workload, factor: int, run_secs, target="llvm"):  # type: ignore[no-untyped-def]
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.target import Target

    return TuningRecord(
        split_trace(workload.mod, factor),
        workload,
        run_secs,
        Target(target),
        ArgInfo.from_prim_func(workload.mod["main"]),
    )
