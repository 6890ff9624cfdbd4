"""Commands run as a user no other process has, under real resource limits (`ulimit -u`, `ulimit -n`).

The process limit counts every process and thread of a user, and root is exempt from it: a test
that starves one runs it as a uid of its own, so nothing else on the box counts against it.
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# No account has it; the tests that use it run one at a time per box (they hold no shared state).
UID = 54321 + os.getpid() % 1000


def drop_to_other_user(limits: dict[int, int] | None = None) -> Callable[[], None]:
    """A preexec_fn: the child becomes UID (group too, no supplementary groups) under ``limits``
    (resource.RLIMIT_* -> soft and hard limit), set before it runs anything."""
    if os.geteuid() != 0:
        pytest.skip("running a command as another user needs root (setuid)")

    def drop() -> None:
        for which, value in (limits or {}).items():
            resource.setrlimit(which, (value, value))
        os.setgroups([])
        os.setgid(UID)
        os.setuid(UID)

    return drop


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A directory UID may write (pytest's tmp_path is root's alone), removed after."""
    path = Path(tempfile.mkdtemp(prefix="farm-other-user-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
