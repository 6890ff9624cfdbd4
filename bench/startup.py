"""Start-up cost: `farm --help`, and time from `farm submit` to the first candidate built.

Compares the farm (lean tensor intrinsics, warm pools) with TVM's default path on the same
task. Prints a table; figures go in docs/benchmarks.md.

    .venv/bin/python bench/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FARM = str(Path(sys.executable).with_name("farm"))


def time_help(repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        begin = time.perf_counter()
        subprocess.run([FARM, "--help"], capture_output=True, check=True)
        samples.append(time.perf_counter() - begin)
    return samples


def farm_first_build(repeat: int, trials: int | None) -> list[float]:
    """Wall time from spawning `farm submit` (fresh registry, nothing cached) to its first build.

    ``trials`` None: the default budget (32 a task), whose first round samples MetaSchedule's
    full population of 512 candidates; smaller budgets sample fewer (foundation.meta_schedule.tuner.search_strategy).
    """
    samples = []
    budget = [] if trials is None else ["--trials", str(trials)]
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as home:
            env = {**os.environ, "FARM_HOME": home}
            begin = time.time()
            proc = subprocess.run([FARM, "submit", "mlp-tiny", "llvm", "1", *budget, "--runs", "1", "--json"],
                                  capture_output=True, text=True, env=env, check=True)
            samples.append(json.loads(proc.stdout)["first_build_at"] - begin)
    return samples


def tvm_default_first_build(timeout: float) -> dict:
    begin = time.time()
    proc = subprocess.run([sys.executable, str(HERE / "_first_build_tvm_default.py"), str(timeout)],
                          capture_output=True, text=True, check=True, cwd=HERE.parent)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["seconds"] = result["first_build_at"] - begin
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--trials", type=int, default=None,
                        help="the submit's budget (default: the farm's default, 32 trials a task)")
    parser.add_argument("--skip-default", action="store_true", help="skip TVM's default path (~1-2 min)")
    args = parser.parse_args()

    help_s = time_help(args.repeat)
    print(f"farm --help                          median {statistics.median(help_s):.3f} s  "
          f"min {min(help_s):.3f} s  ({args.repeat} runs)")
    first = farm_first_build(max(1, args.repeat // 2), args.trials)
    budget = "default budget" if args.trials is None else f"--trials {args.trials}"
    print(f"farm submit -> first candidate built median {statistics.median(first):.2f} s  "
          f"min {min(first):.2f} s  ({len(first)} runs, fresh FARM_HOME each, {budget})")
    if args.skip_default:
        return
    for timeout in (30.0, 120.0):
        r = tvm_default_first_build(timeout)
        print(f"TVM default path, builder timeout {timeout:>3.0f} s: first build result after {r['seconds']:.1f} s "
              f"({r['built']} built, {r['failed']} failed)")


if __name__ == "__main__":
    main()
