"""This process as a child subreaper: the processes its children leave orphaned (a daemon that
detached, a server whose guard died first) become its children, so a benchmark sees them and
their CPU counts in RUSAGE_CHILDREN once they are reaped here."""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt orphaned descendants from now on, or exit: without it their CPU goes uncounted."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("cannot become a child subreaper: orphans' CPU would go uncounted")


def reap_orphans(keep: int | None = None) -> None:
    """Reap every child that has exited but ``keep`` (a Popen's pid, which its own poll reaps)."""
    import psutil

    for child in psutil.Process().children():
        if child.pid == keep:
            continue
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue
