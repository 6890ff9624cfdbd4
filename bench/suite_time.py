"""Where the test suite's time goes: worker-seconds and CPU-seconds per test file, and the slowest tests.

Reads the JUnit XML of a pytest run (setup, call and teardown of each test, as pytest times
them; CPU seconds as tests/support/cpu_time.py records them) and prints each file's
worker-seconds, CPU-seconds, share and test count, then the slowest tests. Worker-seconds are
what the run's wall time is made of; CPU-seconds are what a test costs, whatever else ran beside it.
With --write it also stores each test's seconds in tests/durations.json, which the suite's
conftest reads to hand the longest files to the workers first (the run's tail is then short
files, not one long file on one worker while the others idle).

    scripts/test --junitxml=/tmp/suite.xml          # or any pytest run with --junitxml
    .venv/bin/python bench/suite_time.py /tmp/suite.xml [--top 40] [--write]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
CPU_PROPERTY = "cpu_s"  # tests/support/cpu_time.py


def test_id(classname: str, name: str) -> tuple[str, str]:
    """JUnit's `tests.farm.test_x` (or `tests.farm.test_x.TestClass`) and `test_y[sqlite]` as
    the file's path and pytest's node id."""
    parts = classname.split(".")
    classes = []
    while parts and not parts[-1].startswith("test_"):
        classes.insert(0, parts.pop())  # a class inside the module
    file = "/".join(parts) + ".py"
    return file, "::".join([file, *classes, name])


def read_junit(path: Path) -> list[tuple[str, str, float, float]]:
    """(file, node id, seconds, CPU seconds) of every test case in the report; CPU 0 where the
    run did not record it."""
    cases = []
    for case in ET.parse(path).iter("testcase"):
        file, nodeid = test_id(case.get("classname", ""), case.get("name", ""))
        cpu = sum(float(prop.get("value", 0)) for prop in case.iter("property") if prop.get("name") == CPU_PROPERTY)
        cases.append((file, nodeid, float(case.get("time", 0)), cpu))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path, help="a pytest --junitxml report")
    parser.add_argument("--top", type=int, default=40, help="how many files and tests to list")
    parser.add_argument("--write", action="store_true", help=f"store per-file seconds in {DURATIONS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if not args.junit.is_file():
        print(f"error: no JUnit report at {args.junit} (run pytest with --junitxml={args.junit})", file=sys.stderr)
        return 2
    cases = read_junit(args.junit)
    per_file: Counter[str] = Counter()
    cpu_per_file: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for file, _, seconds, cpu in cases:
        per_file[file] += seconds
        cpu_per_file[file] += cpu
        tests[file] += 1
    total = sum(per_file.values())
    cpu_total = sum(cpu_per_file.values())
    print(f"{len(cases)} tests in {len(per_file)} files: {total:.0f} worker-seconds, {cpu_total:.0f} CPU-seconds")
    print(f"{'worker-s':>9} {'share':>6} {'CPU-s':>7} {'share':>6} {'tests':>5}  file")
    for file, seconds in per_file.most_common(args.top):
        cpu = cpu_per_file[file]
        cpu_share = cpu / (cpu_total or 1)
        print(f"{seconds:9.1f} {seconds / total:6.1%} {cpu:7.1f} {cpu_share:6.1%} {tests[file]:5d}  {file}")
    print(f"\nslowest {args.top} tests (setup + call + teardown; worker-s, CPU-s):")
    for _, nodeid, seconds, cpu in sorted(cases, key=lambda c: -c[2])[:args.top]:
        print(f"{seconds:9.1f} {cpu:7.1f}  {nodeid}")
    if args.write:
        recorded = {nodeid: round(seconds, 1) for _, nodeid, seconds, _ in sorted(cases)}
        DURATIONS.write_text(json.dumps(recorded, indent=0) + "\n")
        print(f"\nwrote {DURATIONS.relative_to(ROOT)} ({len(recorded)} tests)")
    return 0


if __name__ == "__main__":
    # A report piped into `head` ends quietly when head has read enough, as other filters do.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
