"""Connecting to the registry database: URL checks, engines, SQLite pragmas, error messages."""

from __future__ import annotations

import errno
import os
import resource  # here: with no file left, its module could not be opened where it is used
import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from foundation.errors import BadInput, NotFound, OutOfResources, RegistryError, out_of_resources, quoted

URL_FIX = (
    "check --registry / FARM_REGISTRY: sqlite:///path/to/registry.db or postgresql://user@host/db"
)
REACH_FIX = "check --registry / FARM_REGISTRY and that the database server is up and reachable"
SQLITE_FILE_FIX = ("check the permissions of the SQLite file and its directory: this user must be able to write "
                   "both (SQLite writes -wal and -shm files beside it); or point --registry / FARM_REGISTRY elsewhere")
CREATE_FIX = "create one with `farm registry init` (or any `farm submit`), or check --registry / FARM_REGISTRY"


class RegistryMissing(NotFound):
    """No registry where the URL points, and the command may not create one."""


class BadRegistryURL(RegistryError, BadInput):
    """A registry URL that cannot be used at all (malformed, or of a kind the farm does not speak)."""

    exit_code = BadInput.exit_code


class RegistryFull(RegistryError, OutOfResources):
    """The registry's disk (or quota) is full: the write was rolled back, nothing was half-written."""

    exit_code = OutOfResources.exit_code


# PostgreSQL clients wait for the OS TCP timeout (minutes) on a black-holed host otherwise.
CONNECT_TIMEOUT_SEC = 5
SQLITE_BUSY_TIMEOUT_MS = 30000
# Marks a session that will write, so SQLite takes the write lock when the transaction
# begins: upgrading a read lock later fails at once with "database is locked" when
# another writer got there first, whatever the busy timeout.
WRITE_OPTION = "farm_registry_write"


# The drivers the farm installs (psycopg 3, Python's own sqlite3), by backend; None is a URL naming
# none. Any other (psycopg2, asyncpg, a typo) would fail inside SQLAlchemy as an import error.
_DRIVERS = {"postgresql": (None, "psycopg"), "postgres": (None, "psycopg"), "sqlite": (None, "pysqlite")}
DRIVER_FIX = ("write postgresql:// or postgresql+psycopg:// for PostgreSQL (psycopg 3), "
              "sqlite:/// or sqlite+pysqlite:/// for SQLite")
# psycopg is the `postgres` extra: a farm on SQLite (the embedded one, agents) goes without it.
POSTGRES_EXTRA_FIX = "install the farm's PostgreSQL driver: pip install 'tvm-farm[postgres]'"


def parse_registry_url(url: str) -> URL:
    """Parse a registry URL, steering every PostgreSQL spelling to the psycopg 3 driver."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018  (a port that is not a number fails here, not at connect)
    except (ArgumentError, ValueError) as exc:
        raise BadRegistryURL(f"{url!r} is not a registry URL", URL_FIX) from exc
    backend = parsed.get_backend_name()
    if backend not in _DRIVERS:
        raise BadRegistryURL(
            f"unsupported registry URL scheme {parsed.drivername!r} in {masked(parsed)}",
            URL_FIX,
        )
    driver = parsed.drivername.partition("+")[2] or None
    if driver not in _DRIVERS[backend]:
        raise BadRegistryURL(f"the registry URL {masked(parsed)} names the driver {driver!r}, "
                             "which the farm does not install", DRIVER_FIX)
    if backend in ("postgresql", "postgres"):
        _check_postgres_driver(parsed)
        # SQLAlchemy knows no "postgres" dialect, and without a driver it would pick psycopg2.
        return parsed.set(drivername="postgresql+psycopg")
    if "?" in url and parsed.query.get("uri") != "true":
        # SQLAlchemy ends the path at the `?` and drops what it does not know (`reg?x.db` is the file
        # `reg`), warning about some (`?mode=ro`); only a SQLite URI (`uri=true`) passes its query on.
        _path, _, query = url.partition("?")
        raise BadRegistryURL(
            f"the SQLite registry URL {quoted(url)} has a query string ({quoted(query)}) the farm does not take: "
            f"in a URL, `?` starts one, and the path would end at {parsed.database}",
            "drop the query, or write a `?` of the file's name as %3F; to open it read-only, give a SQLite URI: "
            "sqlite:///file:/path/registry.db?mode=ro&uri=true",
        )
    return parsed


def _check_postgres_driver(parsed: URL) -> None:
    """BadRegistryURL (exit 2) naming the `postgres` extra where psycopg cannot be imported: SQLAlchemy
    would fail at the first connection with a traceback about a module, not about the farm."""
    try:
        import psycopg  # noqa: F401  (psycopg[binary] brings libpq; psycopg alone needs the system's)
    except ImportError:
        raise BadRegistryURL(f"the registry {masked(parsed)} is PostgreSQL, and its driver (psycopg) is not "
                             "installed", POSTGRES_EXTRA_FIX) from None


def masked(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def sqlite_in_memory(url: URL) -> bool:
    database = url.database or ""
    return url.get_backend_name() == "sqlite" and (
        database in ("", ":memory:") or database.startswith("file::memory:")
    )


# SQLite's SQLITE_NOTADB: the file is something else than a database.
_SQLITE_NOTADB = 26


def sqlite_path(url: URL) -> Path:
    """The file a SQLite URL names, a SQLite URI's (`sqlite:///file:/path?mode=ro&uri=true`) too."""
    database = url.database or ""
    if url.query.get("uri") == "true" and database.startswith("file:"):
        database = database.removeprefix("file:").removeprefix("//localhost").removeprefix("//")
    return Path(database).expanduser()


def check_sqlite_file(url: URL, *, create: bool) -> None:
    """Refuse a SQLite path that is not, and may not become, a farm registry, touching nothing.

    Without ``create`` the file must exist. A file that is not a SQLite database, or one
    holding other tables and no farm schema revision (another application's), is refused:
    opening it the farm's way would switch it to WAL and add the farm's tables.
    """
    if url.get_backend_name() != "sqlite" or sqlite_in_memory(url):
        return
    path = sqlite_path(url)
    if path.is_dir():
        raise BadRegistryURL(f"the registry path {path} is a directory", "give the path of a file, such as "
                             f"sqlite:///{path / 'registry.db'}")
    if not path.exists():
        if not create:
            raise RegistryMissing(f"no registry at {path}", CREATE_FIX)
        return
    # Before sqlite3 opens it: a FIFO would block the open forever, and a device such as /dev/null
    # opens fine and then fails as "unreachable", leaving a journal file beside it.
    if not path.is_file():
        raise BadRegistryURL(f"the registry path {path} is not a regular file",
                             "give the path of a SQLite file, or of a new one to create")
    try:
        # Read-only, by URI: nothing about the file changes, not even its journal mode.
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as probe:
            tables = {row[0] for row in probe.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        probe.close()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_NOTADB:
            raise RegistryError(f"{path} is not a SQLite database ({exc})",
                                "point --registry at a farm registry, or at a new path to create one") from None
        _check_open_files_left()
        # Unreadable, or read-only where even reading writes (a WAL registry without its -shm file,
        # in a directory this user cannot write).
        what = "cannot be read by this user" if not os.access(path, os.R_OK) else "is read-only for this user"
        raise RegistryError(f"the registry {path} {what} ({exc})", SQLITE_FILE_FIX) from None
    if tables and "alembic_version" not in tables and not _farm_tables(tables):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise RegistryError(f"{path} is not a farm registry: it holds other tables ({shown}); it was left untouched",
                            "point --registry at a farm registry, or at a new path to create one")


def _farm_tables(tables: set[str]) -> bool:
    """The farm's own tables, its version table lost: migrate.ensure_schema says so and how to fix it."""
    from .schema import Base

    return bool(tables & set(Base.metadata.tables))


# Files SQLite opens for a WAL registry: the database, its -wal and its -shm.
_SQLITE_FILES = 3


def _check_open_files_left() -> None:
    """OutOfResources naming the open-file limit (`ulimit -n`) where SQLite's "unable to open database file"
    came from having too few files left to open the registry's, not from its permissions."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        left = soft - (len(os.listdir("/proc/self/fd")) - 1)  # less the listing's own
    except OSError as err:
        if err.errno not in (errno.EMFILE, errno.ENFILE):
            return
        left = 0
    if soft != resource.RLIM_INFINITY and left < _SQLITE_FILES:
        raise out_of_resources(OSError(errno.EMFILE, os.strerror(errno.EMFILE))) from None


def create_registry_engine(url: URL) -> Engine:
    """An engine with the per-connection settings the registry relies on."""
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url)
    return create_engine(
        url,
        pool_pre_ping=True,
        # The coordinator serves many calls at once; most hold a connection only briefly.
        pool_size=16,
        max_overflow=16,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_SEC},
    )


def _sqlite_engine(url: URL) -> Engine:
    in_memory = sqlite_in_memory(url)
    if in_memory:
        # One connection, or every session would see its own empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        directory = sqlite_path(url).parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RegistryError(f"cannot create the registry's directory {directory}: {exc.strerror}",
                                "give a registry path in a directory you can write to") from None
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        # Let SQLAlchemy's "begin" hook below emit BEGIN itself; pysqlite's own
        # implicit transactions cannot be made IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if not in_memory:
            _use_write_ahead_log(cursor)
            # WAL with synchronous=NORMAL is durable across process crashes, which is
            # what a killed agent is; fsync per commit buys only power-loss safety.
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):  # type: ignore[no-untyped-def]
        write = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _use_write_ahead_log(cursor) -> None:  # type: ignore[no-untyped-def]
    """Switch the database file to WAL, waiting out other connections doing the same.

    WAL is a property of the file and sticks once set. Switching needs an exclusive lock,
    and SQLite answers "database is locked" at once, without calling the busy handler, when
    several processes open a fresh registry together; so the wait is ours.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def short_reason(exc: BaseException) -> str:
    """The first line of the driver's message, without SQLAlchemy's SQL and parameters."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip() or type(orig).__name__
    line = text.splitlines()[0].strip()
    return line.removeprefix("connection failed: ")


# SQLite's SQLITE_FULL; PostgreSQL's disk_full (class 53, insufficient resources).
_SQLITE_FULL = 13
_POSTGRES_DISK_FULL = "53100"


def disk_full(exc: BaseException) -> bool:
    """Whether the database refused a write because its disk (or quota) is full."""
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlite_errorcode", None) == _SQLITE_FULL:
        return True
    if getattr(orig, "sqlstate", None) == _POSTGRES_DISK_FULL:
        return True
    return "database or disk is full" in str(orig) or "No space left on device" in str(orig)


# Less than this free is a full disk, to SQLite: a page or two of a file, or of its journal.
_ROOM_BYTES = 1024 * 1024


def _full_sqlite_scratch(url: str) -> str | None:
    """The directory of SQLite's temporary files (VACUUM's copy, a large statement's journal) when its disk
    is the full one and the registry's is not; None otherwise. SQLite takes the first of these that exists
    and this user may write, whatever room it has."""
    import shutil

    try:
        registry_dir = sqlite_path(make_url(url)).parent
        if shutil.disk_usage(registry_dir).free < _ROOM_BYTES:
            return None
    except (ArgumentError, ValueError, OSError):
        return None
    candidates = [(os.environ[name], f"{name}={os.environ[name]}") for name in ("SQLITE_TMPDIR", "TMPDIR")
                  if os.environ.get(name)]
    candidates += [(d, d) for d in ("/var/tmp", "/usr/tmp", "/tmp")]
    for directory, named in candidates:
        if os.path.isdir(directory) and os.access(directory, os.W_OK | os.X_OK):
            try:
                return named if shutil.disk_usage(directory).free < _ROOM_BYTES else None
            except OSError:
                return None
    return None


def registry_error(exc: SQLAlchemyError, url: str) -> RegistryError:
    """Turn a database exception into the one-line error a user can act on."""
    reason = short_reason(exc)
    if disk_full(exc) and url.startswith("sqlite"):
        scratch = _full_sqlite_scratch(url)
        if scratch is not None:
            return RegistryFull(f"the registry at {url} cannot be written: the disk is full for SQLite's temporary "
                                f"files, {scratch} ({reason}); the registry's own disk has room",
                                "free some space there, or point SQLITE_TMPDIR (or TMPDIR) at a directory on a disk "
                                "with room; its write was rolled back, nothing was half-written")
    if disk_full(exc):
        return RegistryFull(f"the registry at {url} cannot be written, its disk is full: {reason}",
                            "free some space on the disk that holds it, or point --registry / FARM_REGISTRY "
                            "elsewhere; its write was rolled back, nothing was half-written")
    if isinstance(exc, IntegrityError):
        return RegistryError(
            f"the registry at {url} refused a write: {reason}",
            "nothing was written; check the ids passed in (model, fingerprint, job, workload)",
        )
    if isinstance(exc, OperationalError):
        if url.startswith("sqlite") and "unable to open" in reason:
            _check_open_files_left()
        if url.startswith("sqlite") and any(s in reason for s in ("readonly", "read-only", "unable to open")):
            if "mode=ro" in url:  # asked for: no file's permissions are to blame
                return RegistryError(f"cannot write the registry at {url}: it was opened read-only (mode=ro in its "
                                     f"URI), and this command writes to it",
                                     "drop mode=ro from the URI, or give the registry's plain path: "
                                     "sqlite:////path/to/registry.db")
            return RegistryError(f"cannot write the registry at {url}: {reason}", SQLITE_FILE_FIX)
        if "locked" in reason or "busy" in reason:
            return RegistryError(
                f"the registry at {url} stayed busy: {reason}",
                "another process holds a long write lock; retry, "
                "or use PostgreSQL for many writers",
            )
        return RegistryError(f"cannot reach the registry at {url}: {reason}", REACH_FIX)
    return RegistryError(f"the registry at {url} failed: {reason}", REACH_FIX)
