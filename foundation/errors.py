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
  70   an internal error (a bug in tvm-farm)
  130  interrupted by SIGINT (Ctrl-C); 143 by SIGTERM                  Interrupted
"""

from __future__ import annotations

import signal
from typing import Any

EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_TIMED_OUT = 5
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


class ValidationFailed(JobFailed):
    """A tuned library's outputs disagree with the untuned build of the same model."""


class TimedOut(FarmError):
    """A command stopped waiting for a job that goes on."""

    exit_code = EXIT_TIMED_OUT


class Interrupted(FarmError):
    """A command stopped by SIGINT or SIGTERM: exit code 128 + the signal, as shells report it."""

    def __init__(self, problem: str, fix: str | None = None, *, signum: int = signal.SIGINT,
                 document: dict[str, Any] | None = None):
        super().__init__(problem, fix, document=document)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + self.signum
