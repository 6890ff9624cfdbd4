"""Where a command's CPU goes, by kind of process: sample the processes under it while it runs,
grouped by command line.

    .venv/bin/python bench/process_cpu.py [--interval 0.5] [--top 25] [--json] -- scripts/test tests/farm

The command runs as a child of this script, a child subreaper (bench/_subreaper.py), so that the
daemons the command detaches (coordinators, agents, their servers) stay under it and are counted.
Every ``--interval`` seconds each process's user+system time is read; a process's figure is the
last one read, so a process that lives less than an interval, and the time after the last read of
one that ends, are missed (the totals say how much, against the children's rusage). PostgreSQL's
backends are not descendants. Run it on a quiet box: the figures are the box's CPU, not the
command's wall.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil
from _subreaper import become_subreaper, reap_orphans
from timing import cpu_model


def kind_of(argv: list[str]) -> str:
    """A process's kind: its command line with paths cut to their last part and numbers dropped."""
    words: list[str] = []
    for arg in argv[:6]:
        if arg.startswith("-c") and len(words) == 1:
            return words[0] + " -c ..."
        word = Path(arg).name if "/" in arg and len(arg) < 200 else arg
        words.append(re.sub(r"\d+", "N", word)[:60])
    return " ".join(words)


def box_busy_s() -> float:
    """The machine's busy seconds so far: user, nice, system, irq and softirq (not idle, iowait or
    the hypervisor's steal), as docs/benchmarks.md counts "box CPU"."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()

    become_subreaper()
    box_start, started = box_busy_s(), time.monotonic()
    child = subprocess.Popen(args.command)
    # Per process, keyed by (pid, start time) so that a reused pid is another process: its kind
    # and its CPU seconds when last read.
    seen: dict[tuple[int, float], tuple[str, float]] = {}
    while child.poll() is None:
        for process in psutil.Process().children(recursive=True):
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
                    argv = process.cmdline()
            except psutil.Error:
                continue
            # Read again each time: a forked child shows its parent's command line until it
            # execs, and an exited one not yet reaped shows none.
            kind = kind_of(argv) if argv else seen.get(key, ("(exited)", 0.0))[0]
            seen[key] = (kind, times.user + times.system)
        reap_orphans(keep=child.pid)
        time.sleep(args.interval)
    wall = time.monotonic() - started
    box = box_busy_s() - box_start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for kind, cpu_s in seen.values():
        groups[kind][0] += 1
        groups[kind][1] += cpu_s
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
    sampled = sum(cpu for _, cpu in groups.values())
    totals = {"cpu": cpu_model(), "wall_s": round(wall, 1), "box_busy_s": round(box, 1),
              "children_rusage_s": round(usage.ru_utime + usage.ru_stime, 1), "sampled_s": round(sampled, 1),
              "processes": len(seen), "exit_code": child.returncode}
    if args.json:
        print(json.dumps({**totals, "groups": [{"kind": k, "processes": n, "cpu_s": round(c, 2)}
                                               for k, (n, c) in ranked]}))
        return 0
    print(f"\n{totals['cpu']}: wall {wall:.1f} s; box busy {box:.1f} CPU-s; children's rusage "
          f"{totals['children_rusage_s']}; sampled {sampled:.1f} in {len(seen)} processes; "
          f"exit code {child.returncode}")
    print(f"{'CPU-s':>8} {'procs':>6} {'each':>6}  kind")
    for kind, (count, cpu) in ranked[:args.top]:
        print(f"{cpu:8.1f} {count:6d} {cpu / count:6.2f}  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
