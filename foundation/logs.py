"""How the daemons log: text or JSON lines, libraries' chatter at WARNING, and the ids of the work a record is about.

Both daemons call ``configure_logging`` once at start. A record names the job, shard or agent it
is about either with ``extra={"job_id": ...}`` or, for everything logged inside a block, with
``with log_ids(job_id=..., shard_id=...)``; an agent's own id, known once it registers, goes on
every record of the process with ``set_process_ids(agent_id=...)``. JSON lines carry them as
fields; the text layout leaves them to the message.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import errno
import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from enum import Enum
from typing import IO, Any


class LogFormat(str, Enum):
    TEXT = "text"
    JSON = "json"


class LogLevel(str, Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


TEXT_LAYOUT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What a record may say it is about, in the order JSON lines carry them.
ID_FIELDS = ("job_id", "shard_id", "agent_id")
# Libraries whose INFO records say what they are doing, not what the farm is (alembic lists
# its plugins at every registry open): written from WARNING up, whatever the daemon's level.
# (Not TVM's: the tuner reads MetaSchedule's INFO records to follow the search.)
LIBRARIES = ("alembic", "sqlalchemy", "grpc", "urllib3", "asyncio", "filelock", "matplotlib", "PIL")

# What configure_logging last installed in this process: the processes a daemon starts
# (the coordinator's ingest process) log the same way.
_configured: tuple[LogFormat, LogLevel] | None = None

# Pairs, not a dict: a context variable's default is shared by every context, so it must not change.
_scoped_ids: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar("farm_log_ids", default=())
_process_ids: dict[str, str] = {}


@contextlib.contextmanager
def log_ids(**ids: str | None) -> Iterator[None]:
    """Every record logged in this block (in this thread or task) names these ids."""
    unknown = set(ids) - set(ID_FIELDS)
    if unknown:
        raise ValueError(f"log ids are {', '.join(ID_FIELDS)}, not {', '.join(sorted(unknown))}")
    token = _scoped_ids.set(tuple({**dict(_scoped_ids.get()), **{k: v for k, v in ids.items() if v}}.items()))
    try:
        yield
    finally:
        _scoped_ids.reset(token)


def logs_job(step: Callable[..., Any]) -> Callable[..., Any]:
    """Every record logged while ``step(self, job_id, ...)`` runs names that job."""

    @functools.wraps(step)
    def with_job_id(self: Any, job_id: str, *args: Any, **kwargs: Any) -> Any:
        with log_ids(job_id=job_id):
            return step(self, job_id, *args, **kwargs)

    return with_job_id


def set_process_ids(**ids: str | None) -> None:
    """Every record of this process from now on names these ids (an agent's own, say); None
    forgets one."""
    unknown = set(ids) - set(ID_FIELDS)
    if unknown:
        raise ValueError(f"log ids are {', '.join(ID_FIELDS)}, not {', '.join(sorted(unknown))}")
    for field, value in ids.items():
        if value:
            _process_ids[field] = value
        else:
            _process_ids.pop(field, None)


class _Ids(logging.Filter):
    """Puts the ids in force on the record, unless the call gave its own with extra=."""

    def filter(self, record: logging.LogRecord) -> bool:
        scoped = dict(_scoped_ids.get())
        for field in ID_FIELDS:
            if getattr(record, field, None) is None:
                value = scoped.get(field) or _process_ids.get(field)
                if value:
                    setattr(record, field, value)
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the ids it names,
    and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in ID_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                document[field] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str)


def configure_logging(log_format: LogFormat | str, level: LogLevel | str, stream: IO[str]) -> logging.Handler:
    """Send every record at ``level`` or above to ``stream`` in ``log_format``; called again, it
    replaces the handler it installed before (and no other)."""
    global _configured
    log_format, level = LogFormat(_word(log_format)), LogLevel(_word(level))
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines() if log_format is LogFormat.JSON else logging.Formatter(TEXT_LAYOUT))
    handler.addFilter(_Ids())
    handler.farm_handler = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "farm_handler", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.value.upper())
    root.setLevel(numeric)
    for library in LIBRARIES:
        logging.getLogger(library).setLevel(max(numeric, logging.WARNING))
    _configured = (log_format, level)
    return handler


def configured() -> tuple[LogFormat, LogLevel] | None:
    """The format and level configure_logging last installed in this process; None before it ran."""
    return _configured


def _word(choice: Enum | str) -> str:
    return (choice.value if isinstance(choice, Enum) else choice).lower()


class LostLogs:
    """Says once, on ``stream``, that a job's log files in ``where`` are not kept because their disk is
    full (or its quota used up), and the job goes on: file handlers that cannot write a record would
    otherwise print a traceback per record to stderr, which is itself one of those files while a job
    tunes (foundation.processes.native_stderr), so every line would be lost without a word."""

    def __init__(self, where: os.PathLike[str] | str, stream: IO[str]):
        self.where = where
        self.stream = stream
        self._said = threading.Event()

    def say(self, err: OSError) -> None:
        """The one warning, the first time only."""
        if self._said.is_set():
            return
        self._said.set()
        self.stream.write(f"warning: the job's logs in {self.where} are not kept: {err.strerror or err} there "
                          "(free some space, or set FARM_HOME to a directory on another disk); the job goes on\n")
        self.stream.flush()

    def watch(self, handlers: Iterable[logging.Handler]) -> None:
        """Route the full-disk failures of ``handlers`` here; any other failure they report as before."""
        for handler in handlers:
            handler.handleError = functools.partial(self._handle_error, handler.handleError)  # type: ignore[method-assign]

    def _handle_error(self, report: Callable[[logging.LogRecord], None], record: logging.LogRecord) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            self.say(err)
            return
        report(record)
