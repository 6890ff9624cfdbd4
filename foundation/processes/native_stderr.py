"""Sending what native code writes to stderr (file descriptor 2) to a file for a while.

TVM's C++ LOG(WARNING) is compiled inline to ``std::cerr << message`` (tvm/runtime/logging.h,
without TVM_LOG_CUSTOMIZE, as the wheels are built): no Python logging handler, callback or
level sees it. MetaSchedule writes such warnings for every task whose blocks name a schedule
rule the target lacks (`Unknown schedule rule "meta_schedule.pool_max" ...`), so during tuning
fd 2 itself points at the job's log file.

Everything that writes to fd 2 in the meantime goes there too, Python's sys.stderr included:
whoever must still reach the terminal (progress bars, a daemon's log) writes to a stream opened
on a copy of the original fd 2 (`terminal_stderr`). Processes started meanwhile keep the file as
their stderr.

A job running in a library caller's background thread (`process_stderr_kept`) must not take the
caller's stderr, its own tracebacks included: there fd 2 stays as it is, and only the worker
processes started meanwhile write theirs to the file (`worker_stderr`, given to each in the child).
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_lock = threading.Lock()
# fd 2 is the process's: a redirection made while another is in force (two tuning runs in one
# process) shares the first one's file, and the last to end restores the terminal's.
_active = 0
_saved: int | None = None
# The file workers started now write their stderr to while a job whose thread keeps the process's fd 2 tunes.
_workers_active = 0
_workers_log: int | None = None
_kept = contextvars.ContextVar("process_stderr_kept", default=False)


def terminal_stderr():
    """A text stream on a copy of fd 2 as it is now: it keeps reaching the terminal (or the
    daemon's log) while `native_stderr_to` points fd 2 elsewhere."""
    return os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="replace")


@contextmanager
def process_stderr_kept() -> Iterator[None]:
    """In this thread, for the duration: `native_stderr_to` leaves fd 2 alone and sends only the
    stderr of worker processes to its file (a job in the background of a caller's process)."""
    token = _kept.set(True)
    try:
        yield
    finally:
        _kept.reset(token)


def worker_stderr() -> int | None:
    """A copy of the file a worker process started now takes as its fd 2 (the caller closes it), while a
    job of a thread under `process_stderr_kept` tunes; None otherwise: the worker inherits fd 2."""
    with _lock:
        return None if _workers_log is None else os.dup(_workers_log)


@contextmanager
def native_stderr_to(path: Path) -> Iterator[Path]:
    """Point fd 2 at ``path`` (appended to) for the duration; restore it after. Under
    `process_stderr_kept`, only the workers started meanwhile write their stderr there."""
    global _active, _saved
    path.parent.mkdir(parents=True, exist_ok=True)
    if _kept.get():
        with _workers_to(path):
            yield path
        return
    with _lock:
        if _active == 0:
            sys.stderr.flush()
            _saved = os.dup(2)
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.dup2(target, 2)
            finally:
                os.close(target)
        _active += 1
    try:
        yield path
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                sys.stderr.flush()
                os.dup2(_saved, 2)
                os.close(_saved)
                _saved = None


@contextmanager
def _workers_to(path: Path) -> Iterator[None]:
    global _workers_active, _workers_log
    with _lock:
        if _workers_active == 0:
            _workers_log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _workers_active += 1
    try:
        yield
    finally:
        with _lock:
            _workers_active -= 1
            if _workers_active == 0 and _workers_log is not None:
                os.close(_workers_log)
                _workers_log = None
