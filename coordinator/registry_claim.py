"""One coordinator per registry: a coordinator claims its registry as it starts, and a second is refused.

Two coordinators on one registry each planned, leased and expired the other's work (a job submitted
to one was leased to the other's agents). The claim is a lock the operating system or the database
server drops with the process that holds it, so a coordinator that died leaves nothing to clean up:
on SQLite an exclusive flock on a file beside the database, on PostgreSQL a session advisory lock
held on a connection of its own. Whoever holds it says who they are (pid, host, address): in the
lock file, or as the connection's application_name, which pg_stat_activity shows.

A claim can also be lost while its coordinator runs: the PostgreSQL server ends the claim's
connection (a restart, an idle timeout, pg_terminate_backend), or someone deletes the lock file as
stale. `RegistryClaim.keep`, called at each tick, takes it again, or says that another coordinator
took it meanwhile, and then this one stops.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from foundation.errors import RegistryError
from foundation.registry.engine import create_registry_engine, masked, parse_registry_url, sqlite_in_memory

# The advisory lock's key: "farm" and "coor" in its two halves, which pg_locks shows as classid and objid.
_PG_KEY_HIGH, _PG_KEY_LOW = 0x6661726D, 0x636F6F72
ADVISORY_KEY = (_PG_KEY_HIGH << 32) | _PG_KEY_LOW
_APPLICATION_PREFIX = "farm-coordinator "
_PG_NAME_LIMIT = 63  # PostgreSQL keeps this much of an application_name
# How often a running coordinator checks that it still holds its claim (a query on PostgreSQL).
KEEP_EVERY_S = 5.0

logger = logging.getLogger("farm.coordinator")


class RegistryClaimed(RegistryError):
    """Another coordinator serves this registry; ``holder`` says who, as it said."""

    def __init__(self, problem: str, fix: str, holder: str = ""):
        super().__init__(problem, fix)
        self.holder = holder


class RegistryClaim:
    """This process's claim on a registry, held until `release` or the process ends."""

    def __init__(self, url: str):
        """Claim the registry at ``url``; raises RegistryClaimed naming the coordinator that holds it."""
        parsed = parse_registry_url(url)
        self._shown = masked(parsed)
        self._file = self._path = self._postgres = None
        self._engine = self._connection = None
        self._address = "starting"
        self._kept_at = time.monotonic()
        self._lock = threading.Lock()  # keep() on the tick thread, release() on the stopping one
        if parsed.get_backend_name() == "sqlite":
            if not sqlite_in_memory(parsed):  # an in-memory registry is this process's alone
                self._path = Path(parsed.database + ".coordinator")
                self._claim_file(self._path)
        else:
            self._postgres = parsed
            self._claim_postgres(parsed)
        self.describe(self._address)

    def describe(self, address: str) -> None:
        """Say who holds the claim: this process, serving ``address``."""
        self._address = address
        holder = f"{self._whoami()}, serving {address}"
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(holder)
            self._file.flush()
        if self._connection is not None:
            name = (_APPLICATION_PREFIX + holder)[:_PG_NAME_LIMIT]
            self._connection.execute(text("SELECT set_config('application_name', :name, false)"), {"name": name})

    def keep(self, now: float | None = None) -> None:
        """Check, at most every KEEP_EVERY_S, that the claim is still held, and take it again where it
        was lost; RegistryClaimed if another coordinator holds it now. A server that does not answer
        is left to the next check (the registry's health says so meanwhile)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if now - self._kept_at < KEEP_EVERY_S:
                return
            self._kept_at = now
            try:
                if self._path is not None and not self._holds_file():
                    logger.warning("the claim file %s was removed while this coordinator held it; claiming it again",
                                   self._path)
                    self._close_file()
                    self._claim_file(self._path)
                elif self._postgres is not None and not self._holds_advisory_lock():
                    self._close_connection()
                    self._take_advisory_lock(self._postgres)
                    logger.warning("claimed the registry at %s again: its server had ended the claim's connection",
                                   self._shown)
                else:
                    return
                self.describe(self._address)
            except RegistryClaimed as err:
                if not self._is_mine(err.holder):
                    raise
                # This process's old session, which its server has not yet seen end: it will.
                self._kept_at = now - KEEP_EVERY_S
            except (RegistryError, SQLAlchemyError) as err:
                self._close_connection()
                logger.warning("cannot claim the registry at %s again yet: %s", self._shown, err)

    def _holds_file(self) -> bool:
        try:
            named = os.stat(self._path)
        except FileNotFoundError:
            return False
        held = os.fstat(self._file.fileno())
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _holds_advisory_lock(self) -> bool:
        if self._connection is None:
            return False
        try:
            self._connection.execute(text("SELECT 1"))
        except SQLAlchemyError:
            logger.warning("the connection holding the claim on the registry at %s ended", self._shown)
            return False
        return True

    def release(self) -> None:
        with self._lock:
            self._close_file()
            self._close_connection()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None

    def _close_connection(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()  # the session's advisory lock ends with it
            except SQLAlchemyError:
                pass  # a connection the server ended already holds nothing
            self._connection = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _claim_file(self, path: Path) -> None:
        try:
            claim = open(path, "a+", encoding="utf-8")
        except OSError as err:
            raise RegistryError(f"cannot open {path} to claim the registry at {self._shown}: {err.strerror}",
                                "check that the registry's folder exists and is writable") from None
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
        if not connection.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_KEY}):
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
                               "stop that coordinator first, or give this one a registry of its own", holder)

    @staticmethod
    def _whoami() -> str:
        return f"pid {os.getpid()} on {socket.gethostname()}"

    def _is_mine(self, holder: str) -> bool:
        """Whether ``holder`` names this process (cut to what an application_name keeps on PostgreSQL)."""
        mine = self._whoami() + ","
        if len(holder) == _PG_NAME_LIMIT - len(_APPLICATION_PREFIX):
            return mine.startswith(holder) or holder.startswith(mine)
        return holder.startswith(mine)
