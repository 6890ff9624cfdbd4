"""The errors a user sees: what is wrong, what to do about it, and the exit code it means.

Every command exits with one of these codes (README, "Exit codes"):

  0    success
  1    the job ran and failed (or was cancelled by `farm cancel`)      JobFailed
  2    bad input: a value the farm cannot accept (a malformed URL,     BadInput (FarmError)
       target, JSON or number; an unknown model or target name; an
       output path that cannot be written); also click's usage errors
  3    not found: a file, job, artifact, fingerprint or registry       NotFound
       that was named does not exist
  4    unreachable: the registry, the coordinator or the tracker       Unreachable, RegistryError
       cannot be reached, is not a farm registry, is outdated, or
       refused a write; a stored artifact is corrupt
  5    gave up waiting (`--timeout`); the job goes on                  TimedOut
  6    the box ran out of something: the disk is full, or a process    OutOfResources
       or open-file limit was reached; nothing was half-written
  70   an internal error (a bug in tvm-farm)
  130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM                  Interrupted
"""

from __future__ import annotations

import errno
import os
import resource  # here, not where a limit is named: with no file left, its module could not be opened then
import signal
from typing import Any

EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_TIMED_OUT = 5
EXIT_OUT_OF_RESOURCES = 6
EXIT_INTERNAL = 70


class FarmError(Exception):
    """An error caused by input or environment, reported as one line on stderr.

    ``problem`` says what is wrong; ``fix`` says what the user can do. The CLI prints
    ``error: {problem} ({fix})`` and exits with ``exit_code``; with ``--json`` it also prints
    ``{"error": problem, "hint": fix, "exit_code": ...}`` (and ``document``, if any) on stdout.
    A plain FarmError is bad input.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(self, problem: str, fix: str | None = None, *, document: dict[str, Any] | None = None):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        # What the command would have printed with --json had it succeeded (a failed job).
        self.document = document

    def __str__(self) -> str:
        return f"{self.problem} ({self.fix})" if self.fix else self.problem

    def to_json(self) -> dict[str, Any]:
        return {**(self.document or {}), "error": self.problem, "hint": self.fix, "exit_code": self.exit_code}


class BadInput(FarmError):
    """A value the farm cannot accept, given on the command line or in the environment."""

    exit_code = EXIT_BAD_INPUT


class NotFound(FarmError):
    """Something named by the user does not exist (a file, job, artifact, fingerprint, registry)."""

    exit_code = EXIT_NOT_FOUND


class Unreachable(FarmError):
    """Something the farm needs (the registry, a coordinator, a tracker) cannot be reached or used."""

    exit_code = EXIT_UNREACHABLE


class RegistryError(Unreachable):
    """The registry cannot be reached, is not a farm registry, is outdated, or refused a write."""


class JobFailed(FarmError):
    """A job ran and ended failed or cancelled."""

    exit_code = EXIT_JOB_FAILED


class TimedOut(FarmError):
    """A command stopped waiting for a job that goes on."""

    exit_code = EXIT_TIMED_OUT


class OutOfResources(FarmError):
    """The box ran out of disk, processes or open files: the input was fine, the machine was not."""

    exit_code = EXIT_OUT_OF_RESOURCES


class Interrupted(FarmError):
    """A command stopped by SIGINT or SIGTERM: exit code 128 + the signal, as shells report it."""

    def __init__(self, problem: str, fix: str | None = None, *, signum: int = signal.SIGINT,
                 document: dict[str, Any] | None = None):
        super().__init__(problem, fix, document=document)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + self.signum


# The most of a value a message quotes: an id a user pasted (or a script built) may be any length.
QUOTED_CHARS = 80


def quoted(value: object) -> str:
    """A value as a message quotes it (its repr), cut to its first characters and its length when
    it is longer than QUOTED_CHARS: one line a person can read, whatever was sent."""
    text = str(value)
    if len(text) <= QUOTED_CHARS:
        return repr(text)
    return f"{text[:QUOTED_CHARS - 20]!r}... ({len(text):,} characters)"


# The longest run of text without a space a message shows whole: a path, a URL, an id within
# the coordinator's bounds.
SHOWN_RUN_CHARS = 256


def shortened(message: str) -> str:
    """A message as the CLI shows it: each run of text without a space longer than SHOWN_RUN_CHARS
    cut as `quoted` cuts a value, wherever a message quoted one whole."""
    import re

    def cut(run: re.Match[str]) -> str:
        text = run.group()
        return f"{text[:QUOTED_CHARS - 20]}... ({len(text):,} characters)"

    return re.sub(rf"\S{{{SHOWN_RUN_CHARS + 1},}}", cut, message)


# What the user can do about an OS error on a path they gave, by errno.
_PATH_FIXES = {
    errno.EACCES: "check the permissions of the path and its directory, or choose another path",
    errno.EPERM: "check the permissions of the path and its directory, or choose another path",
    errno.EROFS: "that file system is read-only: choose a path on a writable one",
    errno.EISDIR: "give a file there, not a directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory: check the path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EEXIST: "remove it or choose another path",
}


# What the OS says, in words, where the errno is lost: an ImportError of a library that could not be
# opened, a RuntimeError of a thread that could not start, an error TVM passed on as its text.
_RESOURCE_WORDS = {
    "Too many open files": errno.EMFILE,
    "can't start new thread": errno.EAGAIN,
    "Resource temporarily unavailable": errno.EAGAIN,
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
}
_DISK_FIX = "free some space or choose another disk; nothing was half-written"
# What ran out, by errno, as a message names it.
_SHORTAGES = {errno.EMFILE: "open files (`ulimit -n`)", errno.ENFILE: "open files (the system's)",
              errno.EAGAIN: "processes or threads (`ulimit -u`)", errno.ENOSPC: "disk space",
              errno.EDQUOT: "disk quota"}


def shortage_in(text: str) -> str | None:
    """What the box ran out of, where an error's text (a candidate's, another process's) says so in the
    OS's words; None for any other text."""
    code = next((c for words, c in _RESOURCE_WORDS.items() if words in text), None)
    if code is None:
        code = next((c for c in _SHORTAGES if f"[Errno {c}]" in text), None)
    return _SHORTAGES.get(code) if code is not None else None


def out_of_resources(err: BaseException) -> OutOfResources | None:
    """The box ran out of disk, open files or processes, as the error the user sees (the limit that
    was reached, not a file that happened to be opened then); None for any other error."""
    code = err.errno if isinstance(err, OSError) else None
    if code is None:
        code = next((c for words, c in _RESOURCE_WORDS.items() if words in str(err)), None)
    if code in (errno.EMFILE, errno.ENFILE):
        return OutOfResources(f"out of open files ({os.strerror(code)}): {_limit('RLIMIT_NOFILE', 'ulimit -n')}",
                              "raise the open-file limit (`ulimit -n 1024` or more) and retry")
    if code == errno.EAGAIN:
        return OutOfResources(f"a process or thread could not start ({os.strerror(code)}): "
                              f"{_limit('RLIMIT_NPROC', 'ulimit -u')}",
                              "raise the process limit (`ulimit -u`) or end other processes of this user, and retry")
    if code in (errno.ENOSPC, errno.EDQUOT):
        where = f" for {err.filename}" if isinstance(err, OSError) and err.filename else ""
        what = "the disk quota is used up" if code == errno.EDQUOT else "the disk is full"
        return OutOfResources(f"{what}{where}: {_first_line(err)}", _DISK_FIX)
    return None


def _limit(name: str, command: str) -> str:
    soft, _hard = resource.getrlimit(getattr(resource, name))
    shown = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,}"
    return f"this process's limit (`{command}`) is {shown}"


def _first_line(err: BaseException) -> str:
    text = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return (text.strip().splitlines() or [type(err).__name__])[0]


def path_error(err: OSError, path: str | os.PathLike[str] | None = None, *, doing: str = "use") -> FarmError:
    """An OS error on a path the user gave, as the error they see: the path, what the OS said,
    and what to do; exit 3 (NotFound) when the path or its directory does not exist, 6
    (OutOfResources) when the disk is full or open files ran out, else 2.

    ``doing`` says what the command was doing with it ("read", "write", "create the directory").
    The one mapping of such errors: commands use it where they touch the path, and the CLI's
    error boundary (farm.cli.app) for any OSError that names a file and got past them.
    """
    path = path if path is not None else err.filename
    reason = err.strerror or type(err).__name__
    problem = f"cannot {doing} {path}: {reason}"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutOfResources(problem, _DISK_FIX)
    resources = out_of_resources(err)  # open files or processes: the limit, not the path, is to blame
    if resources is not None:
        return resources
    if err.errno == errno.ENOENT:
        parent = os.path.dirname(os.path.abspath(os.fspath(path))) if path is not None else None
        if parent is None or not os.path.isdir(parent) or doing.startswith("read"):
            return NotFound(problem, "check the path: it, or its directory, does not exist")
        return BadInput(problem, "nothing can be created there: choose a path in an ordinary directory")
    return BadInput(problem, _PATH_FIXES.get(err.errno or 0, "check the path and choose one this user can use"))
