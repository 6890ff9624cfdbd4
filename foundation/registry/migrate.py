"""Schema revisions: create a new registry, refuse an outdated one, upgrade on request."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from foundation.errors import OutOfResources, RegistryError, quoted

from .engine import (
    CREATE_FIX,
    WRITE_OPTION,
    RegistryMissing,
    check_sqlite_file,
    create_registry_engine,
    masked,
    parse_registry_url,
    registry_error,
    short_reason,
)
from .schema import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any fixed number: it names the lock PostgreSQL sessions take while one of them
# creates or upgrades the schema, so two agents opening a fresh registry do not race.
_PG_SCHEMA_LOCK = 0x7476_6D66_6172_6D
# Alembic's version table (its default name; migrations/env.py keeps it).
_VERSION_TABLE = "alembic_version"
# A migration file's own revision and its parent's, as script.py.mako writes them.
_REVISION = re.compile(r"""^revision(?:\s*:[^=]+)?\s*=\s*["']([^"']+)["']\s*$""", re.M)
_DOWN_REVISION = re.compile(r"""^down_revision(?:\s*:[^=]+)?\s*=\s*(?:None|["']([^"']+)["'])\s*$""", re.M)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built in code so no alembic.ini or working directory matters."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, f"no migrations found in {MIGRATIONS_DIR}"
    return head


def plain_head_revision() -> str | None:
    """The head of the migrations where they are one plain chain, read from their files without
    Alembic; None where they are anything else (a branch, a merge, a form not matched), for
    Alembic to answer. Opening a registry at this head (every farm command, daemon and job) then
    never imports Alembic, a sixth of a short `farm` command's CPU (docs/benchmarks.md)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.findall(source), _DOWN_REVISION.findall(source)
        if len(revision) != 1 or len(down) != 1 or revision[0] in revisions:
            return None
        revisions.add(revision[0])
        if down[0]:
            parents.add(down[0])
    heads = revisions - parents
    if len(heads) != 1 or not parents <= revisions or len(parents) != len(revisions) - 1:
        return None
    return heads.pop()


def current_revision(connection: Connection) -> str | None:
    """The schema revision the registry records, None for none; RegistryError where the version
    table records several (the farm's migrations are one chain: a manual migration went wrong)."""
    from alembic.runtime.migration import MigrationContext

    revisions = MigrationContext.configure(connection).get_current_heads()
    if len(revisions) > 1:
        raise several_revisions(masked(connection.engine.url), revisions)
    return revisions[0] if revisions else None


def _recorded_revision(connection: Connection, tables: set[str]) -> str | None:
    """The revision the registry records: its version table's one row, read as Alembic reads it,
    without Alembic; Alembic's reading where the table holds anything else."""
    if _VERSION_TABLE not in tables:
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalars().all()
    return rows[0] if len(rows) == 1 else current_revision(connection)


def _is_known(revision: str) -> bool:
    """Whether ``revision`` is one of this farm's, exactly: Alembic's own lookup takes a prefix for the
    revision it begins (a row cut to '0007' read as head, and left so) and fails on a blank one."""
    from alembic.script import ScriptDirectory

    return revision in {script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def ensure_schema(engine: Engine, url: str, *, create: bool = True) -> None:
    """Create the schema in an empty database (with ``create``); refuse one at any other
    revision than head, and one holding other tables (another application's database)."""
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
            current = _recorded_revision(connection, tables)
            connection.rollback()
        if current is not None and current == plain_head_revision():
            return
        head = head_revision()
        if current == head:
            return
        if current is None and not tables:
            if not create:
                raise RegistryMissing(f"no farm registry in the database at {url}", CREATE_FIX)
            _upgrade(engine, head, allow_existing=False, url=url)
            return
    except SQLAlchemyError as exc:
        raise registry_error(exc, url) from exc
    if current is None and not tables & set(Base.metadata.tables):
        raise foreign_database(url, tables)
    raise schema_mismatch(url, current, head)


def farm_tables(tables: set[str]) -> bool:
    """Whether ``tables`` are the farm's (a registry whose version row or table was lost), not another application's."""
    return bool(tables & set(Base.metadata.tables))


def foreign_database(url: str, tables: set[str]) -> RegistryError:
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return RegistryError(
        f"the database at {url} is not a farm registry: it holds other tables ({shown}); it was left untouched",
        "point --registry at a farm registry, or at an empty database to create one",
    )


def several_revisions(url: str, revisions: Sequence[str]) -> RegistryError:
    shown = sorted(quoted(r) for r in revisions)
    count = {2: "two", 3: "three"}.get(len(shown), str(len(shown)))
    return RegistryError(
        f"the registry at {url} records {count} schema versions: {', '.join(shown[:-1])} and {shown[-1]} "
        f"(its {_VERSION_TABLE} table must hold one row)",
        f"keep the row of the revision its tables are at: `DELETE FROM {_VERSION_TABLE} WHERE version_num = "
        f"'<the other>'`, then run `farm registry upgrade --registry {url}`",
    )


def schema_mismatch(url: str, current: str | None, head: str) -> RegistryError:
    if current is None:
        return no_revision(url, head)
    if not current.strip():
        return RegistryError(
            f"the registry at {url} records a blank schema revision (its {_VERSION_TABLE} row is empty)",
            f"set it to the revision its tables are at: `UPDATE {_VERSION_TABLE} SET version_num = '<revision>'` "
            f"('{head}' if this farm made it), then run `farm registry upgrade --registry {url}`",
        )
    if _is_known(current):
        return RegistryError(
            f"the registry at {url} has schema revision {current}, this farm needs {head}",
            f"run `farm registry upgrade --registry {url}`",
        )
    return RegistryError(
        f"the registry at {url} has schema revision {current}, newer than this farm knows (its newest is {head}), "
        f"or its {_VERSION_TABLE} row was edited",
        "upgrade tvm-farm on this machine to the version that wrote the registry, or set the row to the revision "
        f"its tables are at: `UPDATE {_VERSION_TABLE} SET version_num = '<revision>'`",
    )


def no_revision(url: str, head: str) -> RegistryError:
    """The farm's tables and no schema revision: its version row (or table) was lost."""
    return RegistryError(
        f"the database at {url} holds the farm's tables but no schema revision (its {_VERSION_TABLE} table is "
        "missing or empty)",
        f"record the revision its tables are at: `CREATE TABLE IF NOT EXISTS {_VERSION_TABLE} (version_num "
        f"VARCHAR(32) NOT NULL PRIMARY KEY); INSERT INTO {_VERSION_TABLE} VALUES ('<revision>')` ('{head}' if "
        "this farm made it); or point --registry at an empty database",
    )


def _upgrade(
    engine: Engine, head: str, *, allow_existing: bool, url: str
) -> tuple[str | None, str]:
    with engine.connect().execution_options(**{WRITE_OPTION: True}) as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite changes a table by copying it (Alembic batch mode); dropping the original
            # would trip the foreign keys of rows pointing at it. SQLite's own recipe: keys off
            # (only possible outside a transaction, hence the driver connection), then one
            # foreign_key_check before commit.
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SCHEMA_LOCK}
                    )
                # Checked again under the lock: another process may have upgraded meanwhile.
                current = current_revision(connection)
                if current == head:
                    return current, head
                if current is not None and not _is_known(current):
                    raise schema_mismatch(url, current, head)
                if current is not None and not allow_existing:
                    raise schema_mismatch(url, current, head)
                from alembic import command

                try:
                    command.upgrade(alembic_config(connection), "head")
                except SQLAlchemyError as exc:
                    raise _upgrade_failed(url, current, head, exc) from exc
                if sqlite:
                    _check_foreign_keys(connection, url)
        finally:
            if sqlite:
                connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")
    return current, head


def _upgrade_failed(url: str, current: str | None, head: str, exc: SQLAlchemyError) -> RegistryError:
    """An upgrade the database refused: a full disk is said as such; else its tables were not at the
    revision recorded (a manual migration half done), and the one transaction undid every step."""
    full = registry_error(exc, url)
    if isinstance(full, OutOfResources):
        return full
    return RegistryError(
        f"upgrading the registry at {url} from {current or 'nothing'} to {head} failed: {short_reason(exc)}",
        f"nothing was changed; check that its {_VERSION_TABLE} row names the revision its tables are at",
    )


def _check_foreign_keys(connection: Connection, url: str) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        tables = sorted({row[0] for row in broken})
        raise RegistryError(
            f"upgrading the registry at {url} would break references in {', '.join(tables)}",
            "nothing was changed; the rows named by `PRAGMA foreign_key_check` need fixing first",
        )


def upgrade_registry(url: str, *, create: bool = False) -> str:
    """Bring the registry at ``url`` to the newest schema; returns the revision it is now at.
    With ``create``, an empty database (or a new SQLite file) becomes a registry at the newest
    schema, so that a deployment's one migration step serves its first start and every upgrade."""
    parsed = parse_registry_url(url)
    check_sqlite_file(parsed, create=create)
    engine = create_registry_engine(parsed)
    try:
        with engine.connect() as connection:
            current = current_revision(connection)
            tables = set(inspect(connection).get_table_names())
            connection.rollback()
        head = head_revision()
        if current is None and tables - {_VERSION_TABLE} and not farm_tables(tables):
            raise foreign_database(masked(parsed), tables)
        if current is None and tables - {_VERSION_TABLE}:
            raise schema_mismatch(masked(parsed), current, head)
        if current is None and not create:
            raise RegistryMissing(f"no farm registry in the database at {masked(parsed)}", CREATE_FIX)
        return _upgrade(engine, head, allow_existing=True, url=masked(parsed))[1]
    except SQLAlchemyError as exc:
        raise registry_error(exc, masked(parsed)) from exc
    finally:
        engine.dispose()
