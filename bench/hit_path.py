"""The registry hit path: `farm submit` answered from the registry, `farm run` load + first inference.

Needs a registry that already holds the model's artifact; with --prepare it tunes one with a
small budget first (the hit path does not depend on tuning quality).

    FARM_HOME=/tmp/qs/home .venv/bin/python bench/hit_path.py [--model resnet-18] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

FARM = str(Path(sys.executable).with_name("farm"))


def timed(args: list[str]) -> tuple[float, dict]:
    begin = time.perf_counter()
    proc = subprocess.run([FARM, *args, "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - begin
    if proc.returncode != 0:
        sys.exit(f"farm {' '.join(args)} failed: {proc.stderr.strip()}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--batch", default="1")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--prepare", action="store_true", help="tune a small artifact first if none exists")
    args = parser.parse_args()

    submit = ["submit", args.model, "llvm", args.batch]
    if args.prepare:
        timed([*submit, "--trials", "32", "--runs", "3"])
    walls, inner = [], []
    for _ in range(args.repeat):
        wall, doc = timed(submit)
        if not doc["cache_hit"]:
            sys.exit("not a registry hit: run with --prepare, or point FARM_HOME at a tuned registry")
        walls.append(wall)
        inner.append(doc["seconds"])
    print(f"farm submit {args.model} (hit), whole process: median {statistics.median(walls):.3f} s  "
          f"min {min(walls):.3f} s  max {max(walls):.3f} s  ({args.repeat} runs)")
    print(f"  of which inside submit():        median {statistics.median(inner):.3f} s")

    walls, loads, firsts = [], [], []
    for _ in range(args.repeat):
        wall, doc = timed(["run", args.model, "llvm", args.batch, "--runs", "1", "--warmup", "0"])
        walls.append(wall)
        loads.append(doc["load_s"])
        firsts.append(doc["first_inference_s"])
    both = [a + b for a, b in zip(loads, firsts)]
    print(f"farm run {args.model}: load + first inference median {statistics.median(both):.3f} s "
          f"(load {statistics.median(loads):.3f} s, first inference {statistics.median(firsts):.3f} s); "
          f"whole process median {statistics.median(walls):.3f} s  ({args.repeat} runs)")


if __name__ == "__main__":
    main()
