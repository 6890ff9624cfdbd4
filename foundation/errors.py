"""The one error type a user sees: what is wrong, and what to do about it."""

from __future__ import annotations


class FarmError(Exception):
    """An error caused by input or environment, reported as one line on stderr.

    ``problem`` says what is wrong; ``fix`` says what the user can do. The CLI prints
    ``error: {problem} ({fix})`` and exits with ``exit_code``.
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.problem} ({self.fix})" if self.fix else self.problem


class NotFound(FarmError):
    """Something named by the user does not exist (model, artifact, job)."""

    exit_code = 3


class RegistryError(FarmError):
    """The registry cannot be reached, is outdated, or refused a write."""

    exit_code = 4


class ValidationFailed(FarmError):
    """A tuned library's outputs disagree with the untuned build of the same model."""

    exit_code = 5
