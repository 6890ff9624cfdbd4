"""How pytest-xdist's workers share the suite: the longest work first, and long files of
independent tests taken one test at a time.

Under `--dist loadfile` a file is one unit of work, handed out in collection order. One long
file started late decided the wall time (the last minutes of a run were one worker on
test_interrupts.py while two idled). Here the units are ordered by their recorded seconds
(tests/durations.json, written by bench/suite_time.py), longest first, and the files in
SPREAD_FILES, whose tests share no fixture wider than a test, are split into one unit per test.
Every other file stays whole, so its module fixtures (a tuned model, say) are still made once.

A unit with a test marked `quiet_box` takes the box alone for a while (support.quiet_box): it
waits for the tests under way in the other workers to end and holds theirs back. Handed out
first, it waited beside the longest tests of the run (one took 226 s) with two workers idle;
it is handed out once the units of QUIET_AFTER_S or more are, when the others run short tests
and enough of them are left to fill the other workers while it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from xdist.scheduler import LoadFileScheduling

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"

# Files whose every test starts its own processes and registry (no module- or session-scoped
# fixture of their own): a worker may take any one of their tests alone.
SPREAD_FILES = frozenset({
    "tests/farm/cli/test_interrupts.py",
    "tests/farm/test_local_cluster.py",
    "tests/farm/test_local_cluster_faults.py",
    "tests/farm/test_until.py",
    "tests/farm/test_metrics_scrape.py",
    "tests/coordinator/test_server_ports.py",
    "tests/agent/test_rpc_supervision.py",
})

# What a test not yet in durations.json is guessed to take.
UNKNOWN_SLOW_S = 30.0
UNKNOWN_S = 0.5

# Units this long or longer are handed out before a quiet_box unit. The quiet unit waits for the
# tests under way in the other workers to end (the drain), so what runs beside it when it asks
# should be short: at 30 s a drain took 25-50 s of its wait (Zen 5, 2026-11-29: the test charged
# 37-62 worker-seconds for 1.4 CPU-seconds). At 10 s, 208 worker-seconds of shorter units are
# left after it (tests/durations.json), several times the ~25 s it holds a worker.
QUIET_AFTER_S = 10.0


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or itself in a spread file."""
    file = nodeid.split("::", 1)[0]
    return nodeid if file in SPREAD_FILES else file


class LongestFirstFileScheduling(LoadFileScheduling):
    """`--dist loadfile` with SPREAD_FILES split per test, in the order the workers collected
    the tests (order_longest_first), not xdist's reorder by the number of tests a unit holds."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)


def recorded_seconds() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def order_longest_first(items: list) -> None:
    """Sort the collected tests in place: units by their recorded seconds, longest first, the
    quiet_box units after those of QUIET_AFTER_S or more; a unit's tests stay together and in
    their order."""
    seconds = recorded_seconds()
    unit_seconds: dict[str, float] = {}
    for item in items:
        guess = UNKNOWN_SLOW_S if item.get_closest_marker("slow") else UNKNOWN_S
        unit = work_unit(item.nodeid)
        unit_seconds[unit] = unit_seconds.get(unit, 0.0) + seconds.get(item.nodeid, guess)
    first_seen = {}
    quiet = set()
    for index, item in enumerate(items):
        first_seen.setdefault(work_unit(item.nodeid), index)
        if item.get_closest_marker("quiet_box"):
            quiet.add(work_unit(item.nodeid))

    def turn(unit: str) -> int:
        if unit in quiet:
            return 1
        return 0 if unit_seconds[unit] >= QUIET_AFTER_S else 2

    items.sort(key=lambda item: (turn(work_unit(item.nodeid)), -unit_seconds[work_unit(item.nodeid)],
                                 first_seen[work_unit(item.nodeid)]))
