"""A lease with numbered attempts, of a shard or of a validation: pure state, no I/O.

Both are granted to one agent at a time, ``pending -> leased``, under the next attempt id; a
message naming an attempt that is no longer the current lease changes nothing; an attempt
that fails (or whose agent goes silent past the TTL) puts the lease back to ``pending``, and
``failed`` once ``max_attempts`` attempts failed, every attempt's reason kept. Each kind says
which of its states these are, and words its own messages (`LeaseRules`);
foundation.domain.shard_leases and foundation.domain.validations apply them.

Time is passed in as seconds on the caller's clock (the coordinator uses epoch seconds, so
values survive a restart).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

# A lease whose attempts failed this many times fails for good (and with it, its job).
DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class AttemptFailure:
    attempt: int
    agent_id: str | None
    reason: str


class StaleAttempt(ValueError):
    """A report, completion or failure names an attempt that is no longer the current lease
    (of a shard, or of a validation)."""


class Leasable(Protocol):
    """What a lease is kept on: a Shard or a Validation."""

    state: Any
    attempt: int  # the leases granted so far; the current lease's attempt id while leased
    agent_id: str | None
    leased_at: float | None
    failures: tuple[AttemptFailure, ...]

    def moved(self, new: Any, **changes: Any) -> Any: ...


L = TypeVar("L", bound=Leasable)


@dataclass(frozen=True)
class LeaseRules(Generic[L]):
    """One kind of lease: its states, and how it words a stale attempt and a silent agent."""

    pending: enum.Enum
    leased: enum.Enum
    done: enum.Enum
    failed: enum.Enum
    # Why a message about (item, attempt, agent id or None) must be dropped, or None if current.
    stale_reason: Callable[[L, int, str | None], str | None]
    # The reason an attempt ends when its agent is silent: (item, seconds silent, ttl).
    silence_reason: Callable[[L, float, float], str]

    def grant(self, item: L, agent_id: str, now: float) -> L:
        """The item leased to ``agent_id`` under the next attempt id."""
        return item.moved(self.leased, attempt=item.attempt + 1, agent_id=agent_id, leased_at=now)

    def check_current(self, item: L, attempt: int, agent_id: str | None = None) -> None:
        """Raise StaleAttempt unless ``attempt`` (of ``agent_id``, if given) is the current lease."""
        reason = self.stale_reason(item, attempt, agent_id)
        if reason is not None:
            raise StaleAttempt(reason)

    def finish(self, item: L, attempt: int, agent_id: str | None = None) -> L:
        """The item done, if ``attempt`` is its current lease; else raise StaleAttempt."""
        self.check_current(item, attempt, agent_id)
        return item.moved(self.done)

    def fail_attempt(self, item: L, attempt: int, reason: str, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                     agent_id: str | None = None) -> L:
        """End the current lease as failed: pending again, or failed once ``max_attempts``
        attempts failed, every attempt's reason kept; raise StaleAttempt if ``attempt`` is not
        current."""
        self.check_current(item, attempt, agent_id)
        failures = item.failures + (AttemptFailure(attempt, item.agent_id, reason),)
        if len(failures) >= max_attempts:
            return item.moved(self.failed, failures=failures)
        return item.moved(self.pending, failures=failures, agent_id=None, leased_at=None)

    def expire(self, items: Iterable[L], agent_last_heartbeat: Mapping[str, float], now: float, ttl: float,
               max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> list[L]:
        """Leased items whose agent has been silent for longer than ``ttl``, each with that
        attempt failed (`fail_attempt`): a lease that kills every agent that takes it ends up
        failed instead of circling forever. Taking the lease proves the agent was alive then,
        even if its last beat is older; an agent absent from ``agent_last_heartbeat`` is silent
        since it took the lease."""
        expired = []
        for item in items:
            if item.state is not self.leased:
                continue
            assert item.leased_at is not None
            alive_at = max(agent_last_heartbeat.get(item.agent_id, item.leased_at), item.leased_at)
            silent = now - alive_at
            if silent > ttl:
                expired.append(self.fail_attempt(item, item.attempt, self.silence_reason(item, silent, ttl),
                                                 max_attempts))
        return expired


def judges_silence(now: float, heard_since: float, ttl: float) -> bool:
    """Whether agents' silence may be held against them at ``now``: only once the coordinator
    has been able to hear them for a whole ``ttl`` since ``heard_since`` (its start, or its
    registry's return).

    Beats sent while the coordinator was down (restarting) or without its registry were never
    heard, so that time is not an agent's silence: the first TTL after is grace, within which a
    live agent beats again (or re-registers under its id) and keeps its lease and attempt. After
    it, `LeaseRules.expire` judges as ever: nothing silent for a TTL since ``heard_since`` is spared.
    """
    return now - heard_since > ttl
