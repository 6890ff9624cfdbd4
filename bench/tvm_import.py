"""What importing TVM costs a new process, and what of it is ml_dtypes': every `farm submit`,
agent, coordinator that loads a model, and builder zygote pays it once.

Times `import <module>` in new Pythons (wall and CPU, the children's rusage), with the thread
settings the farm's processes run with, for this venv's interpreter or another's (--python, to
compare two installs in one run). Prints one line a module and interpreter; figures go in
docs/benchmarks.md.

    .venv/bin/python bench/tvm_import.py [--rounds 5] [--python OTHER_VENV/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

MODULES = ("numpy", "ml_dtypes", "tvm")
VERSIONS = ("numpy", "ml_dtypes", "apache-tvm", "apache-tvm-ffi")


def versions(python: str) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, sys; "
            "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))")
    return json.loads(subprocess.run([python, "-c", code, *VERSIONS], capture_output=True, text=True,
                                     check=True).stdout)


def time_import(python: str, module: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a new Python that imports ``module`` and exits."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # as farm/cli/launch.py sets it
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    subprocess.run([python, "-c", f"import {module}"], check=True, env=env)
    wall = time.perf_counter() - begin
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="imports of each module, alternating interpreters")
    parser.add_argument("--python", action="append", default=[], help="another interpreter to time beside this one")
    args = parser.parse_args(argv)
    pythons = [sys.executable, *args.python]
    for python in pythons:
        print(f"{python}: {versions(python)}")
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for module in MODULES:
            for python in pythons:
                samples.setdefault((python, module), []).append(time_import(python, module))
    print(f"\n{args.rounds} rounds\n{'module':<10} {'wall median':>11} {'CPU median':>10} {'CPU min':>8}  interpreter")
    for (python, module), runs in samples.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"{module:<10} {wall:10.3f}s {cpu:9.3f}s {min(cpus):7.3f}s  {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
