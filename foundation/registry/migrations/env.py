"""Alembic environment for the registry: runs on the connection the farm hands in."""

from __future__ import annotations

from alembic import context

from foundation.registry.engine import create_registry_engine, parse_registry_url
from foundation.registry.schema import Base

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    # Reached only when someone runs the alembic CLI by hand with sqlalchemy.url set.
    engine = create_registry_engine(parse_registry_url(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.connect() as connection:
            _run_on(connection)
    finally:
        engine.dispose()


def _run_on(connection) -> None:  # type: ignore[no-untyped-def]
    # render_as_batch: SQLite cannot ALTER most things, so later migrations copy tables.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
