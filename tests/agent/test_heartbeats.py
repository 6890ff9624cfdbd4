"""When an agent sends a heartbeat (agent.daemon.heartbeat_due): every interval, unless an
accepted report in the last interval already said what the beat would, and a full beat at
least every FULL_HEARTBEAT_EVERY intervals."""

from __future__ import annotations

import pytest

from agent.daemon import FULL_HEARTBEAT_EVERY, heartbeat_due

INTERVAL = 5.0
NEVER = float("-inf")


@pytest.mark.parametrize(
    ("now", "last_sent_at", "unchanged", "last_report_at", "due", "why"),
    [
        (5.0, NEVER, False, NEVER, True, "the first beat"),
        (10.0, 5.0, True, NEVER, True, "no report: an idle agent beats every interval"),
        (10.0, 5.0, True, 3.0, True, "the last report is older than the interval"),
        (10.0, 5.0, True, 8.0, False, "a report in the last interval said it all"),
        (10.0, 5.0, False, 8.0, True, "its lease list or RPC server changed"),
        (5.0 + (FULL_HEARTBEAT_EVERY - 1) * INTERVAL, 5.0, True, 30.0, False, "not yet a full beat's turn"),
        (5.0 + FULL_HEARTBEAT_EVERY * INTERVAL, 5.0, True, 34.0, True, "a full beat every few intervals"),
    ],
)
def test_heartbeat_due(now, last_sent_at, unchanged, last_report_at, due, why):
    assert heartbeat_due(now, last_sent_at, unchanged, last_report_at, INTERVAL) is due, why
