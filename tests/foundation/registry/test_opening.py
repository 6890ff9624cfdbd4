"""Opening a registry: only a creating command creates one; what is not a farm registry stays untouched."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from foundation.errors import BadInput, NotFound, RegistryError
from foundation.registry import RegistryStore, upgrade_registry
from foundation.registry.engine import BadRegistryURL, RegistryMissing, parse_registry_url


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tables(url: str) -> set[str]:
    engine = create_engine(parse_registry_url(url))
    try:
        with engine.connect() as connection:
            return set(inspect(connection).get_table_names())
    finally:
        engine.dispose()


def test_a_missing_registry_is_not_created_by_a_reader(registry_url):
    with pytest.raises(RegistryMissing) as raised:
        RegistryStore(registry_url, create=False)
    assert isinstance(raised.value, NotFound) and "farm registry init" in raised.value.fix
    if registry_url.startswith("sqlite"):
        assert not Path(registry_url.removeprefix("sqlite:///")).parent.exists(), "a directory was made"
    else:
        assert _tables(registry_url) == set()
    with pytest.raises(RegistryMissing):
        upgrade_registry(registry_url)
    RegistryStore(registry_url, create=True).dispose()
    RegistryStore(registry_url, create=False).dispose()  # now it exists


def test_another_applications_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as app:
        app.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        app.execute("INSERT INTO customers (name) VALUES ('ada')")
    app.close()
    before = _digest(path)
    for create in (False, True):
        with pytest.raises(RegistryError, match="is not a farm registry: it holds other tables \\(customers\\)"):
            RegistryStore(f"sqlite:///{path}", create=create)
    with pytest.raises(RegistryError, match="not a farm registry"):
        upgrade_registry(f"sqlite:///{path}")
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"], "a journal or WAL file was left"


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database, " * 100)
    before = _digest(path)
    with pytest.raises(RegistryError, match="is not a SQLite database"):
        RegistryStore(f"sqlite:///{path}")
    assert _digest(path) == before


def test_another_applications_postgresql_database_is_refused_untouched(registry_url):
    if not registry_url.startswith("postgresql"):
        pytest.skip("the SQLite case is the file test above")
    engine = create_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE customers (id integer primary key)"))
    engine.dispose()
    with pytest.raises(RegistryError, match="not a farm registry"):
        RegistryStore(registry_url)
    assert _tables(registry_url) == {"customers"}


def test_a_directory_is_no_registry_path(tmp_path):
    with pytest.raises(BadRegistryURL, match="is a directory") as raised:
        RegistryStore(f"sqlite:///{tmp_path}")
    assert raised.value.exit_code == BadInput.exit_code


@pytest.mark.parametrize("url", ["postgresql://h:notaport/db", "postgresql://u@[::1:5432/db"])
def test_malformed_urls_are_bad_input(url):
    with pytest.raises(BadRegistryURL, match="is not a registry URL") as raised:
        RegistryStore(url)
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("url", ["postgresql+psycopg2://u@h/db", "postgresql+asyncpg://u@h/db",
                                 "postgresql+pg8000://u@h/db", "postgres+asyncpg://u@h/db",
                                 "postgresql+bogus://u@h/db", "sqlite+bogus:///registry.db"])
def test_drivers_the_farm_does_not_install_are_bad_input(url):
    driver = url.split("+")[1].split(":")[0]
    with pytest.raises(BadRegistryURL, match=f"names the driver '{driver}'") as raised:
        parse_registry_url(url)
    assert raised.value.exit_code == 2
    assert "postgresql+psycopg://" in raised.value.fix and "sqlite+pysqlite:///" in raised.value.fix


@pytest.mark.parametrize(("url", "driver"), [
    ("postgresql://u@h/db", "postgresql+psycopg"), ("postgres://u@h/db", "postgresql+psycopg"),
    ("postgresql+psycopg://u@h/db", "postgresql+psycopg"), ("postgres+psycopg://u@h/db", "postgresql+psycopg"),
    ("sqlite:///registry.db", "sqlite"), ("sqlite+pysqlite:///registry.db", "sqlite+pysqlite"),
])
def test_every_spelling_of_the_installed_drivers_is_taken(url, driver):
    assert parse_registry_url(url).drivername == driver


def test_a_sqlite_path_that_is_no_regular_file_is_refused_before_it_is_opened(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def no_open(*args, **kwargs):
        raise AssertionError(f"sqlite3 opened {args}")

    # Opening a FIFO would block the test; opening /dev/null would leave /dev/null-journal behind.
    monkeypatch.setattr(sqlite3, "connect", no_open)
    for path in (fifo, Path("/dev/null")):
        for create in (False, True):
            with pytest.raises(BadRegistryURL, match=f"the registry path {path} is not a regular file") as raised:
                RegistryStore(f"sqlite:///{path}", create=create)
            assert raised.value.exit_code == 2
        with pytest.raises(BadRegistryURL, match="is not a regular file"):
            upgrade_registry(f"sqlite:///{path}", create=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_an_uncreatable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RegistryError, match="cannot create the registry's directory"):
        RegistryStore(f"sqlite:///{blocker / 'sub' / 'registry.db'}")


@pytest.mark.parametrize("url, query", [("sqlite:///{tmp}/reg?x.db", "'x.db'"),
                                        ("sqlite:///{tmp}/reg?mode=ro", "'mode=ro'")])
def test_a_sqlite_url_with_a_query_is_refused_not_cut_at_the_question_mark(tmp_path, recwarn, url, query):
    url = url.replace("{tmp}", str(tmp_path))
    with pytest.raises(BadRegistryURL) as raised:
        RegistryStore(url, create=True)
    assert raised.value.exit_code == 2 and f"has a query string ({query})" in raised.value.problem
    assert f"the path would end at {tmp_path / 'reg'}" in raised.value.problem and "%3F" in raised.value.fix
    assert list(tmp_path.iterdir()) == [] and not recwarn.list


def test_a_sqlite_uri_opens_the_file_it_names_read_only(tmp_path):
    RegistryStore(f"sqlite:///{tmp_path / 'reg.db'}", create=True).dispose()
    store = RegistryStore(f"sqlite:///file:{tmp_path / 'reg.db'}?mode=ro&uri=true", create=False)
    try:
        assert store.list_jobs() == []
    finally:
        store.dispose()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("reg.db")) == []


def test_a_write_through_a_read_only_sqlite_uri_says_it_was_opened_read_only(tmp_path):
    RegistryStore(f"sqlite:///{tmp_path / 'reg.db'}", create=True).dispose()
    store = RegistryStore(f"sqlite:///file:{tmp_path / 'reg.db'}?mode=ro&uri=true", create=False)
    try:
        with pytest.raises(RegistryError) as raised:
            store.upsert_fingerprint("cpu-0123456789ab", "cpu", "a CPU", {})
    finally:
        store.dispose()
    assert raised.value.exit_code == 4 and "opened read-only (mode=ro in its URI)" in raised.value.problem
    assert "permissions" not in raised.value.fix and "drop mode=ro" in raised.value.fix


OPEN_WITH_NO_FILE_LEFT = """
import os, resource, sys
import foundation.registry.migrate, foundation.registry.store  # imported while files are left
from foundation.errors import FarmError
from foundation.registry import RegistryStore
open_now = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    RegistryStore(sys.argv[1], create=False)
except FarmError as err:
    print(err.exit_code, err)
"""


def test_a_registry_opened_with_no_file_left_names_the_open_file_limit_not_its_permissions(tmp_path):
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    RegistryStore(url, create=True).dispose()
    proc = subprocess.run([sys.executable, "-c", OPEN_WITH_NO_FILE_LEFT, url], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.startswith("6 out of open files") and "`ulimit -n`" in proc.stdout, proc.stdout + proc.stderr
    assert "permissions" not in proc.stdout and "read-only" not in proc.stdout
