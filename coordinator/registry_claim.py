"""One coordinator per registry: a coordinator claims its registry as it starts, and a second is refused.

Two coordinators on one registry each planned, leased and expired the other's work (a job submitted
to one was leased to the other's agents). The claim is a lock the operating system or the database
server drops with the process that holds it, so a coordinator that died leaves nothing to clean up:
on SQLite an exclusive flock on a file beside the database, on PostgreSQL a session advisory lock
held on a connection of its own. Whoever holds it says who they are (pid, host, address): in the
lock file, or as the connection's application_name, which pg_stat_activity shows.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from foundation.errors import RegistryError
from foundation.registry.engine import create_registry_engine, masked, parse_registry_url, sqlite_in_memory

# The advisory lock's key: "farm" and "coor" in its two halves, which pg_locks shows as classid and objid.
_PG_KEY_HIGH, _PG_KEY_LOW = 0x6661726D, 0x636F6F72
_PG_KEY = (_PG_KEY_HIGH << 32) | _PG_KEY_LOW
_APPLICATION_PREFIX = "farm-coordinator "
_PG_NAME_LIMIT = 63  # PostgreSQL keeps this much of an application_name


class RegistryClaimed(RegistryError):
    """Another coordinator serves this registry."""


class RegistryClaim:
    """This process's claim on a registry, held until `release` or the process ends."""

    def __init__(self, url: str):
        """Claim the registry at ``url``; raises RegistryClaimed naming the coordinator that holds it."""
        parsed = parse_registry_url(url)
        self._shown = masked(parsed)
        self._file = None
        self._engine = self._connection = None
        if parsed.get_backend_name() == "sqlite":
            if not sqlite_in_memory(parsed):  # an in-memory registry is this process's alone
                self._claim_file(Path(parsed.database + ".coordinator"))
        else:
            self._claim_postgres(parsed)
        self.describe("starting")

    def describe(self, address: str) -> None:
        """Say who holds the claim: this process, serving ``address``."""
        holder = f"pid {os.getpid()} on {socket.gethostname()}, serving {address}"
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(holder)
            self._file.flush()
        if self._connection is not None:
            name = (_APPLICATION_PREFIX + holder)[:_PG_NAME_LIMIT]
            self._connection.execute(text("SELECT set_config('application_name', :name, false)"), {"name": name})

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None
        if self._connection is not None:
            self._connection.close()  # the session's advisory lock ends with it
            self._connection = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _claim_file(self, path: Path) -> None:
        claim = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(claim.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            claim.seek(0)
            holder = claim.read().strip() or "a process that has not said who it is"
            claim.close()
            raise self._claimed(holder) from None
        except OSError as err:
            claim.close()
            raise RegistryError(f"cannot lock {path} to claim the registry at {self._shown}: {err.strerror}",
                                "put the registry on a local file system, where locks work") from None
        self._file = claim

    def _claim_postgres(self, parsed) -> None:
        try:
            self._take_advisory_lock(parsed)
        except SQLAlchemyError as err:
            self.release()
            raise RegistryError(f"cannot claim the registry at {self._shown}: {type(err.orig or err).__name__}",
                                "check that the registry's server is up and reachable") from None

    def _take_advisory_lock(self, parsed) -> None:
        # Advisory locks are the database's own: another registry on the same server is another lock.
        self._engine = create_registry_engine(parsed)
        connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        if not connection.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": _PG_KEY}):
            holder = connection.scalar(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :high AND l.objid = :low "
                "AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
                {"high": _PG_KEY_HIGH, "low": _PG_KEY_LOW})
            connection.close()
            self._engine.dispose()
            self._engine = None
            holder = (holder or "").removeprefix(_APPLICATION_PREFIX) or "a session that has not said who it is"
            raise self._claimed(holder)
        self._connection = connection

    def _claimed(self, holder: str) -> RegistryClaimed:
        return RegistryClaimed(f"another coordinator serves the registry at {self._shown}: {holder}",
                               "stop that coordinator first, or give this one a registry of its own")
