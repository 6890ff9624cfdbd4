"""What `scripts/setup` takes on a fresh checkout with each installer: uv (the default) and pip.

Clones this checkout's HEAD into a temporary folder once, then, alternating the installers,
removes its `.venv` and runs `INSTALL_PROMTOOL=0 scripts/setup` (promtool's apt-get, mostly
network, is left out: it runs beside the install either way). Prints each run's wall seconds and
the CPU-seconds of the setup and everything it waited for, then the medians, and checks that both
installers put the same package versions in place.

    python3 bench/setup_install.py --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _packages(checkout: Path) -> dict[str, str]:
    listed = subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format", "json",
                             "--exclude-editable"], capture_output=True, text=True, check=True)
    return {p["name"].lower(): p["version"] for p in json.loads(listed.stdout) if p["name"].lower() not in (
        "pip", "uv", "setuptools")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs per installer (alternated)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float]]] = {"uv": [], "pip": []}
    packages: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="setup-bench-") as scratch:
        checkout = Path(scratch) / "checkout"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(checkout)], check=True)
        for run in range(args.runs):
            for installer in ("uv", "pip"):
                shutil.rmtree(checkout / ".venv", ignore_errors=True)
                cpu, wall = _children_cpu(), time.monotonic()
                subprocess.run([str(checkout / "scripts" / "setup")], check=True, cwd=checkout,
                               env={**os.environ, "INSTALLER": installer, "INSTALL_PROMTOOL": "0"})
                spent = (time.monotonic() - wall, _children_cpu() - cpu)
                times[installer].append(spent)
                packages[installer] = _packages(checkout)
                if not args.json:
                    print(f"run {run + 1} {installer:>3}: {spent[0]:5.1f} s wall, {spent[1]:5.1f} CPU-s", flush=True)
    same = packages["uv"] == packages["pip"]
    medians = {name: {"wall_s": statistics.median(w for w, _ in runs), "cpu_s": statistics.median(c for _, c in runs)}
               for name, runs in times.items()}
    if args.json:
        print(json.dumps({"medians": medians, "runs": times, "same_packages": same}))
    else:
        for name, median in medians.items():
            print(f"median {name:>3}: {median['wall_s']:5.1f} s wall, {median['cpu_s']:5.1f} CPU-s")
        print(f"same package versions: {same} ({len(packages['uv'])} packages)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
