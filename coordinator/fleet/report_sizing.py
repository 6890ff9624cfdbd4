"""How large agents' reports are: sized so the fleet's reports come at a rate the coordinator takes.

Every ReportRecords costs the serving process about a millisecond of gRPC's own work, whatever
it carries, and the answers of one group commit reach its event loop together: with a thousand
agents reporting 16 records each, ~330 reports a second came back in bursts of hundreds, and the
heartbeats answered after such a burst made the latency tail (docs/benchmarks.md, "Coordinator
at scale"). The records a fleet measures per second do not depend on how they are batched, so
the coordinator asks for larger batches when records come faster: ``records / s ÷ report_rate``
records a report, never fewer than the configured minimum. Agents also report at least every
``report_within`` seconds, so a slow agent in a fast fleet does not sit on its records; that
bound grows with the number of reporting agents, so that time-bound reports alone stay within
the rate too.

The sizes go out with each lease and each report's answer, so a running agent follows the fleet
as it grows or shrinks. Each agent is told the fleet's size spread at random (`offer`): agents
that measure at one rate (a rack of identical boxes) and leased a job's shards in one burst
would otherwise report in step for good, and a report answered late (after a group commit)
sends the next one with every other answer of its group, pulling them into step again. With a
thousand such agents the reports came in waves of ~150 within 200 ms, then none for a second or
two: report latency of seconds and heartbeats answered behind the waves (docs/benchmarks.md,
"Coordinator at scale"). Sizes that differ from batch to batch keep each agent's reports
drifting against the others'. An agent killed mid-shard loses at most the batch in flight and
the records measured since: larger batches lose more, bounded by ``report_within``.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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
class ReportSize:
    records: int  # records per ReportRecords
    within_s: float  # the longest an agent keeps a measured record before reporting it


class ReportSizing:
    """Thread-safe: reports are noted on the server's loop, sizes read there and in the pool."""

    def __init__(self, min_records: int = 16, report_rate: float = 100.0, min_within_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, jitter: float = DEFAULT_JITTER,
                 rng: random.Random | None = None):
        if min_records < 1 or report_rate <= 0 or min_within_s <= 0:
            raise ValueError("min_records, report_rate and min_within_s must be positive")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be at least 0 and below 1")
        self.min_records = min_records
        self.report_rate = report_rate
        self.min_within_s = min_within_s
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._records: deque[tuple[float, int]] = deque()  # (when, records) of accepted reports
        self._recorded = 0  # the sum of _records
        self._last_report: dict[str, float] = {}  # agent id -> when its last accepted report came
        self._size = ReportSize(min_records, min_within_s)
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
        fleet = self.size()
        if not self.jitter:
            return fleet
        with self._lock:  # one generator, shared by the loop and the pool's threads
            spread, shorter = self._rng.uniform(-self.jitter, self.jitter), self._rng.uniform(0, self.jitter)
        records = min(MAX_RECORDS_PER_REPORT, max(self.min_records, round(fleet.records * (1 + spread))))
        return ReportSize(records, fleet.within_s * (1 - shorter))

    def size(self) -> ReportSize:
        """The fleet's size: what ``report_rate`` asks of the records measured lately."""
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
        records = min(MAX_RECORDS_PER_REPORT, max(self.min_records, math.ceil(records_per_s / self.report_rate)))
        within = max(self.min_within_s, len(self._last_report) / self.report_rate)
        return ReportSize(records, within)
