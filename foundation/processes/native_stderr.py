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
"""

from __future__ import annotations

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


def terminal_stderr():
    """A text stream on a copy of fd 2 as it is now: it keeps reaching the terminal (or the
    daemon's log) while `native_stderr_to` points fd 2 elsewhere."""
    return os.fdopen(os.dup(2), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="replace")


@contextmanager
def native_stderr_to(path: Path) -> Iterator[Path]:
    """Point fd 2 at ``path`` (appended to) for the duration; restore it after."""
    global _active, _saved
    path.parent.mkdir(parents=True, exist_ok=True)
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
