"""How large agents' reports are, so that the fleet's reports come at a rate the coordinator takes.

The contract, for a `ReportPolicy` (the coordinator's --records-per-report, --report-rate,
--report-within and --report-jitter):

- the fleet's size (`ReportSizing.size`) is ``records measured per second ÷ report_rate``
  records a report, never fewer than ``min_records`` nor more than MAX_RECORDS_PER_REPORT, and
  a report at least every ``max(min_within_s, reporting agents ÷ report_rate)`` seconds, over
  the last WINDOW_S seconds of accepted reports;
- each agent is told that size spread at random by up to ``jitter`` (`ReportSizing.offer`),
  with every lease and every accepted report's answer, so running agents follow the fleet and
  do not report in step.

An agent killed mid-shard loses at most the batch in flight and what it measured since: larger
batches lose more, bounded by the time bound. Why sizes are the fleet's and spread:
docs/benchmarks.md, "Why the fleet path exists".
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.values import ReportSize

# Seconds of reports the rate is measured over: long enough to hold several reports of each
# agent, short enough to follow a fleet that grows.
WINDOW_S = 10.0
# Sizes are worked out again at most this often (they are read with every report's answer).
RECOMPUTE_EVERY_S = 1.0
# A report never carries more records than this (a message of a few MB at most).
MAX_RECORDS_PER_REPORT = 512
# How far the size told to one agent strays from the fleet's, either way (`offer`): a batch of
# 55 records takes 41 to 69, so two agents in step are a few seconds apart after one report.
DEFAULT_JITTER = 0.25


@dataclass(frozen=True)
class ReportPolicy:
    """How the fleet is asked to report: at least ``min_records`` records a report, more when
    records come faster than ``report_rate`` reports a second would carry; at least every
    ``min_within_s`` seconds (longer in a large fleet); each agent's size spread by ``jitter``."""

    min_records: int = 16
    report_rate: float = 100.0
    min_within_s: float = 10.0
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        if self.min_records < 1 or self.report_rate <= 0 or self.min_within_s <= 0:
            raise ValueError("min_records, report_rate and min_within_s must be positive")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be at least 0 and below 1")


class ReportSizing:
    """Thread-safe: reports are noted on the server's loop, sizes read there and in the pool."""

    def __init__(self, policy: ReportPolicy = ReportPolicy(), clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None):
        self.policy = policy
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._records: deque[tuple[float, int]] = deque()  # (when, records) of accepted reports
        self._recorded = 0  # the sum of _records
        self._last_report: dict[str, float] = {}  # agent id -> when its last accepted report came
        self._size = ReportSize(policy.min_records, policy.min_within_s)
        self._computed_at = -math.inf

    def note(self, agent_id: str, records: int) -> None:
        """An accepted report of ``records`` records (trials, failed ones included) from ``agent_id``."""
        now = self._clock()
        with self._lock:
            self._records.append((now, records))
            self._recorded += records
            self._last_report[agent_id] = now

    def offer(self) -> ReportSize:
        """The size to tell one agent (with a lease or a report's answer): the fleet's (`size`),
        its records spread by up to ``jitter`` either way, never below the minimum, and its
        time bound shortened by up to ``jitter``, never lengthened past the one configured."""
        fleet, jitter = self.size(), self.policy.jitter
        if not jitter:
            return fleet
        with self._lock:  # one generator, shared by the loop and the pool's threads
            spread, shorter = self._rng.uniform(-jitter, jitter), self._rng.uniform(0, jitter)
        records = min(MAX_RECORDS_PER_REPORT, max(self.policy.min_records, round(fleet.records * (1 + spread))))
        return ReportSize(records, fleet.within_s * (1 - shorter))

    def size(self) -> ReportSize:
        """The fleet's size: what the policy's ``report_rate`` asks of the records measured lately."""
        now = self._clock()
        with self._lock:
            if now - self._computed_at >= RECOMPUTE_EVERY_S:
                self._size = self._compute(now)
                self._computed_at = now
            return self._size

    def _compute(self, now: float) -> ReportSize:
        since = now - WINDOW_S
        while self._records and self._records[0][0] < since:
            self._recorded -= self._records.popleft()[1]
        for agent_id in [a for a, at in self._last_report.items() if at < since]:
            del self._last_report[agent_id]
        # Over the span the window holds: a fleet that just started reporting is not taken
        # for a slow one (its agents would otherwise ramp up a batch at a time).
        span = min(WINDOW_S, max(RECOMPUTE_EVERY_S, now - self._records[0][0])) if self._records else WINDOW_S
        records_per_s = self._recorded / span
        policy = self.policy
        records = min(MAX_RECORDS_PER_REPORT, max(policy.min_records, math.ceil(records_per_s / policy.report_rate)))
        within = max(policy.min_within_s, len(self._last_report) / policy.report_rate)
        return ReportSize(records, within)
