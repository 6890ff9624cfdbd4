"""The agent's timing rules: when a heartbeat is due, how long to back off, which failures pass.

Pure functions and values (no clock: times are passed in), used by the state machine and by
the retries of calls made inside a lease's work (agent.coordinator_calls.retry_unavailable).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

# How long an idle agent's LeaseShard may be held by the coordinator (a long poll): one call
# per this many seconds per idle agent instead of one per retry_after (1 s), and work is
# picked up as soon as it exists. A coordinator without long polls answers at once.
LEASE_WAIT_S = 20
# A busy agent's accepted reports tell the coordinator it is alive and its lease current, so
# a heartbeat with nothing new to say is skipped while they keep coming (`heartbeat_due`); a
# full one still goes at least every this many intervals.
FULL_HEARTBEAT_EVERY = 6
MIN_HEARTBEAT_INTERVAL_S = 0.2
# The longest the work loop waits when the coordinator asks it to come back later.
MAX_RETRY_AFTER_S = 5.0

# gRPC status codes (by name) of a coordinator that is away for now (restarting, overloaded):
# the call is tried again.
TRANSIENT_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
# ... and of one that does not know this agent (or no longer takes it as it was): register again.
FORGOTTEN_CODES = frozenset({"NOT_FOUND", "FAILED_PRECONDITION"})
# A heartbeat that keeps failing is said once, then once per this many failed beats.
BEATS_FAILED_SAID_EVERY = 60
# A call retried through an outage (registering, asking for work, reporting) is said on each of its
# first RETRIES_SAID_FIRST failed tries, then once per RETRIES_SAID_EVERY (about a minute at the
# backoffs' 5-10 s caps): an hour without a coordinator is not a warning every few seconds.
RETRIES_SAID_FIRST = 3
RETRIES_SAID_EVERY = 12
# Each wait of a backoff is drawn from its upper half: a fleet whose calls failed together (a
# coordinator restart, a coordinator without its registry) would otherwise retry in step, every
# agent at the same moment, for as long as the outage lasts.
BACKOFF_JITTER = 0.5


def retry_said(failed: int) -> str | None:
    """What the warning of a call's ``failed``-th failed try in a row ends with ("" for the first
    few), or None when that try is not said."""
    if failed < RETRIES_SAID_FIRST:
        return ""
    if failed == RETRIES_SAID_FIRST:
        return f" (try {failed}; said every {RETRIES_SAID_EVERY} tries from now on)"
    return f" (try {failed})" if failed % RETRIES_SAID_EVERY == 0 else None


def heartbeat_due(now: float, last_sent_at: float, unchanged: bool, last_report_at: float,
                  interval: float) -> bool:
    """Whether the agent sends a heartbeat now (monotonic seconds).

    Not when it would say nothing new (``unchanged``: the same registration, lease list and RPC
    server state as the last beat it sent) and a report was accepted within the last interval:
    that told the coordinator the agent is alive (coordinator.calls.reports) and that its lease
    is current (a report under a lease that is not is refused, and the shard stops), which is
    what the beat would have. A full beat still goes every FULL_HEARTBEAT_EVERY intervals, for
    what only a lease list shows (a lease granted to the agent that it never heard of).
    """
    if not unchanged or now - last_report_at > interval:
        return True
    return now - last_sent_at >= FULL_HEARTBEAT_EVERY * interval - interval / 2


@dataclass
class Backoff:
    """Waits that double after each failure, from ``first`` up to ``cap`` seconds, each drawn at
    random from its upper ``jitter`` share (BACKOFF_JITTER; 0: exactly the doubling waits).
    ``draw`` gives numbers in [0, 1): a seeded generator's where a test wants them fixed."""

    first: float
    cap: float
    jitter: float = BACKOFF_JITTER
    draw: Callable[[], float] = field(default=random.random, repr=False)
    _next: float | None = field(default=None, repr=False)

    def next(self) -> float:
        """The wait before the next try; the one after is up to twice as long (up to the cap)."""
        wait = self.first if self._next is None else self._next
        self._next = min(wait * 2, self.cap)
        return wait * (1.0 - self.jitter * self.draw())

    def reset(self) -> None:
        self._next = None
