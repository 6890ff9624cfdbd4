"""The suite's box lock (support.quiet_box) under pytest-xdist: a measurement taken with the box
held alone overlaps no other test's work, the set-up of that test's module and session fixtures
included (a cluster started or a registry tuned there takes the CPU as much as a test does)."""

from __future__ import annotations

import json
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = """
import json, os, time
pytest_plugins = ["support.quiet_box"]

def record(name, begin):
    with open(os.environ["BOX_LOCK_RECORD"], "a") as out:
        out.write(json.dumps([name, begin, time.monotonic()]) + "\\n")
"""

BUSY = """
import time
import pytest
from conftest import record

@pytest.fixture(scope="module")
def cluster():
    begin = time.monotonic()
    time.sleep(3)  # as a module fixture starting processes would, before any test of it runs
    record("module fixture", begin)

def test_uses_the_cluster(cluster):
    pass
"""

QUIET = """
import time
import pytest
from conftest import record
from support.quiet_box import box_lock_directory, quiet_box

pytestmark = pytest.mark.quiet_box

@pytest.fixture(scope="module")
def measured(request):
    time.sleep(1)  # the other worker's module fixture is under way by now
    with quiet_box(box_lock_directory(request.config)):
        begin = time.monotonic()
        time.sleep(0.5)
        record("quiet measurement", begin)

def test_ranks_the_measurement(measured):
    pass
"""


def test_a_quiet_measurement_waits_for_another_workers_module_fixture(pytester, monkeypatch):
    record = pytester.path / "record.jsonl"
    monkeypatch.setenv("BOX_LOCK_RECORD", str(record))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    pytester.makeini("[pytest]\nmarkers =\n    quiet_box: y\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_busy=BUSY, test_quiet=QUIET)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    spans = {name: (begin, end) for name, begin, end in map(json.loads, record.read_text().splitlines())}
    busy, quiet = spans["module fixture"], spans["quiet measurement"]
    # The workers start together and the quiet fixture asks for the box a second after: it must
    # wait for the other worker's module fixture to end (they overlapped by 1.5 s when a test held
    # the box from its own set-up only).
    assert quiet[0] >= busy[1], spans
