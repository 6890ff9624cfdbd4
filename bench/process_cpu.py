"""Where a command's CPU goes, by kind of process: sample /proc while it runs, group by command line.

    .venv/bin/python bench/process_cpu.py [--interval 0.5] [--top 25] -- scripts/test tests/farm/test_local_cluster.py

The command runs as a child of this script, which makes itself a child subreaper so that daemons
the command detaches (coordinators, agents, their servers) stay its descendants and are counted.
Every ``--interval`` seconds each descendant's user+system time is read from /proc/<pid>/stat;
a process's figure is the last one read, so a process that lives less than an interval, and the
time after the last read of one that ends, are missed (the totals say how much, against the
children's rusage). Run it on a quiet box: the figures are the box's CPU, not the command's wall.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
UNNAMED = ("?", "(kernel or exited)")


@dataclass
class Seen:
    kind: str
    cpu_s: float


def read_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user+system seconds) of one process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after its closing one.
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def kind_of(pid: int) -> str:
    """A process's kind: its command line with paths cut to their last part and numbers dropped."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return UNNAMED[0]
    if not argv:
        return UNNAMED[1]
    words = []
    for arg in argv[:6]:
        if arg.startswith("-c") and len(words) == 1:
            return words[0] + " -c ..."
        word = os.path.basename(arg) if "/" in arg and len(arg) < 200 else arg
        words.append(re.sub(r"\d+", "N", word)[:60])
    return " ".join(words)


def descendants(root: int) -> dict[int, float]:
    """Every live process under ``root`` (and root), with its CPU seconds so far."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                parents[int(name)], cpu[int(name)] = stat
    under = {root}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in under and pid not in under:
                under.add(pid)
                changed = True
    return {pid: cpu[pid] for pid in under if pid in cpu}


def reap_orphans(child: subprocess.Popen) -> int | None:
    """Reap what exited among the processes handed to this subreaper; the command's exit code once it ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return child.returncode
        if pid == 0:
            return None
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode


def box_busy_s() -> float:
    """The machine's busy seconds so far: user, nice, system, irq and softirq (not idle, iowait or
    the hypervisor's steal), as docs/benchmarks.md counts "box CPU"."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--json", action="store_true", help="print the groups as JSON")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    box_start, started = box_busy_s(), time.monotonic()
    child = subprocess.Popen(args.command)
    seen: dict[tuple[int, float], Seen] = {}  # (pid, first seen at): a reused pid is a new process
    first_seen: dict[int, float] = {}
    while True:
        now = time.monotonic()
        live = descendants(child.pid)
        for pid in list(first_seen):
            if pid not in live:
                del first_seen[pid]
        for pid, cpu_s in live.items():
            key = (pid, first_seen.setdefault(pid, now))
            # Read again each time: a forked child shows its parent's command line until it execs,
            # and an exited one not yet reaped shows none.
            kind = kind_of(pid)
            if key in seen and kind in UNNAMED:
                kind = seen[key].kind
            seen[key] = Seen(kind, cpu_s)
        if reap_orphans(child) is not None:
            break
        time.sleep(args.interval)
    wall = time.monotonic() - started
    box = box_busy_s() - box_start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for entry in seen.values():
        groups[entry.kind][0] += 1
        groups[entry.kind][1] += entry.cpu_s
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
    sampled = sum(cpu for _, cpu in groups.values())
    if args.json:
        print(json.dumps({"wall_s": wall, "box_busy_s": box, "children_rusage_s": usage.ru_utime + usage.ru_stime,
                          "sampled_s": sampled, "exit_code": child.returncode,
                          "groups": [{"kind": k, "processes": n, "cpu_s": c} for k, (n, c) in ranked]}))
        return 0
    print(f"\nwall {wall:.1f} s; box busy {box:.1f} CPU-s; children's rusage {usage.ru_utime + usage.ru_stime:.1f}; "
          f"sampled {sampled:.1f} in {len(seen)} processes; exit code {child.returncode}")
    print(f"{'CPU-s':>8} {'procs':>6} {'each':>6}  kind")
    for kind, (count, cpu) in ranked[:args.top]:
        print(f"{cpu:8.1f} {count:6d} {cpu / count:6.2f}  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
