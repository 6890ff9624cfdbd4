"""What forking the builder and runner workers saves: whole `farm submit` processes, forked workers
(the default) against TVM's own (`FARM_FORK_WORKERS=0`), in alternating pairs.

Each run is a fresh `farm submit MODEL llvm BATCH --trials N` into a fresh FARM_HOME (so never a
registry hit), timed from outside: wall time, and CPU time of the process and everything it reaped
(its workers, or its zygote, which reaps its forks). Prints each variant's medians and the
pairwise ratios; the figures go in docs/benchmarks.md ("Workers forked from one import").

    .venv/bin/python bench/forked_workers.py [--model mlp-tiny --batch 1 --trials 16 --pairs 5] [--json]

Run it on a quiet box.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FARM = str(Path(sys.executable).with_name("farm"))
VARIANTS = {"forked": "1", "tvm": "0"}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def one_submit(fork: str, model: str, batch: int, trials: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="farm-bench-fork-") as home:
        env = dict(os.environ, FARM_HOME=home, FARM_FORK_WORKERS=fork)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        begin = time.perf_counter()
        done = subprocess.run([FARM, "submit", model, "llvm", str(batch), "--trials", str(trials), "--json"],
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - begin
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"farm submit failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    summary = json.loads(done.stdout)
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "trials": summary["trials"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp-tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for pair in range(args.pairs + 1):  # the first pair warms the page cache, not counted
        order = list(VARIANTS) if pair % 2 else list(reversed(VARIANTS))
        for name in order:
            result = one_submit(VARIANTS[name], args.model, args.batch, args.trials)
            if pair:
                runs[name].append(result)
            print(f"pair {pair}{' (warm-up)' if not pair else ''} {name}: {result['wall_s']:.2f} s wall, "
                  f"{result['cpu_s']:.2f} CPU-s", file=sys.stderr)

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    ratios = {key: statistics.median(f[key] / t[key] for f, t in zip(runs["forked"], runs["tvm"]))
              for key in ("wall_s", "cpu_s")}
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
           "command": f"farm submit {args.model} llvm {args.batch} --trials {args.trials}", "pairs": args.pairs,
           "median": {name: {"wall_s": median(name, "wall_s"), "cpu_s": median(name, "cpu_s")} for name in VARIANTS},
           "ratio_forked_over_tvm": ratios, "runs": runs}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['command']}, {args.pairs} pairs, {out['cpu']} ({out['cores']} cores), {out['date']}")
    print(f"{'workers':<8} {'wall s':>8} {'CPU s':>8}")
    for name in VARIANTS:
        print(f"{name:<8} {median(name, 'wall_s'):>8.2f} {median(name, 'cpu_s'):>8.2f}")
    print(f"forked/tvm (median of pairs): wall {ratios['wall_s']:.2f}, CPU {ratios['cpu_s']:.2f}")


if __name__ == "__main__":
    main()
