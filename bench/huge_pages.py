"""A farm library's latency with its memory on transparent huge pages against on 4 KB pages, process by process.

A heavy matmul of bert streams 2.4-9.4 MB of weights a call and runs up to 1.7x slower inside the model
than alone, where its pages' translations stay cached between calls; in the model they do not. glibc
(2.35 and newer) puts malloc's large blocks on huge pages with GLIBC_TUNABLES=glibc.malloc.hugetlb=1
where THP is in `madvise` mode, so TVM's weights and workspaces land on them. Each process loads the
library (farm.load from FARM_HOME's registry), times it, and says how much of its memory is on huge
pages (AnonHugePages); the two settings alternate, process after process, so a slow minute of the VM
falls on both.

    FARM_HOME=HOME .venv/bin/python bench/huge_pages.py bert [--processes 3] [--runs 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUGE = "glibc.malloc.hugetlb=1"


def child(model: str, runs: int) -> None:
    import farm

    deployed = farm.load(model, "llvm", 1, threads=2)
    latency = deployed.time(deployed.example_inputs(), runs=runs, warmup=3)
    huge_kb = 0
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("AnonHugePages:"):
                huge_kb = int(line.split()[1])
    print(json.dumps({"median_ms": latency.median_ms, "std_ms": latency.std_ms, "anon_huge_kb": huge_kb}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--processes", type=int, default=3, help="processes of each setting, alternating")
    parser.add_argument("--runs", type=int, default=20, help="timed inferences a process")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.runs)
        return
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    mode = thp.read_text().strip() if thp.exists() else "unknown"
    print(f"{args.model}: THP {mode}; {args.processes} processes each way, {args.runs} runs each", flush=True)
    results: dict[str, list[dict]] = {"4k": [], "huge": []}
    for n in range(args.processes):
        for name, tunables in (("4k", ""), ("huge", HUGE)):
            env = {**os.environ, "GLIBC_TUNABLES": tunables, "PYTHONPATH": str(ROOT)}
            out = subprocess.run([sys.executable, __file__, args.model, "--child", "--runs", str(args.runs)],
                                 env=env, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(result)
            print(f"  {name:<4} process {n + 1}: {result['median_ms']:8.2f} ms median, "
                  f"{result['anon_huge_kb'] / 1024:.0f} MiB on huge pages", flush=True)
    medians = {name: statistics.median(r["median_ms"] for r in rs) for name, rs in results.items()}
    print(f"huge / 4k, median of the processes' medians: {medians['huge'] / medians['4k']:.3f} "
          f"({medians['huge']:.1f} / {medians['4k']:.1f} ms); spread of the 4k processes "
          f"{min(r['median_ms'] for r in results['4k']):.1f}-{max(r['median_ms'] for r in results['4k']):.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({
            "command": " ".join(["bench/huge_pages.py", *sys.argv[1:]]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "model": args.model, "thp": mode, "runs": args.runs, "results": results,
            "median_ms": medians, "huge_over_4k": medians["huge"] / medians["4k"],
        }, indent=2) + "\n")


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    main()
