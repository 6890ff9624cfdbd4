"""The trial plan in one phase against two: one model tuned from nothing in pairs, the same budget each
way; every library and onnxruntime timed in one process, interleaved.

One phase is the quick start as it stands (`--trials-per-task 32`: a per-task cap, the plan by FLOPs);
two phases (FARM_PHASED_PLAN=1, foundation.domain.trial_phases) spend the first half by the plan and
re-plan the rest from what it measured, to the kernels furthest from their ceiling, at the same total
budget (`--trials`, the one-phase plan's budget) and a per-task cap of 4x the average. Each tune runs as
`farm submit --cold` in its own process and registry with no shipped pack, the sides alternating
(one, two, one, two...) so a slow minute of the VM falls on both; then each library is built from its
records in the CPU's default form and all are timed with onnxruntime in rotated rounds.

    .venv/bin/python bench/plan_ab.py resnet-18 [--pairs 2] [--trials-per-task 32] [--work DIR]
        [--reuse one-phase-1=REGISTRY_URL] [--rounds 8] [--runs 5] [--json OUT]

A tune already in DIR (its tune.json) is not run again; `--reuse SIDE-N=URL` counts a registry tuned
the same way before (the pack recording's cold quick start) as that side's tune N.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _same_records import build_default_form, loaded_and_compared, model_and_records, report_header
from cache_flush import time_with_onnxruntime
from prepack import load_average
from timing import cpu_model

ONE, TWO = "one-phase", "two-phase"


def plan_budget(args) -> int:
    """The trials the one-phase plan spends on the model (`farm submit --dry-run --json`: a minor task takes
    fewer than the cap), the two-phase side's --trials."""
    done = subprocess.run([str(Path(sys.executable).with_name("farm")), "submit", args.model, "llvm", str(args.batch),
                           "--trials-per-task", str(args.trials_per_task), "--cold", "--dry-run", "--json"],
                          env={**os.environ, "FARM_SHIPPED_PACKS": "0", "FARM_HOME": str(args.work / "dry-run")},
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the dry run exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return int(json.loads(done.stdout)["trials"])


def tune(side: str, n: int, budget: int, args) -> dict:
    """`farm submit --cold` of the model into this tune's own registry; its trials and wall time."""
    home = args.work / f"{side}-{n}"
    home.mkdir(parents=True, exist_ok=True)
    registry = f"sqlite:///{home / 'registry.db'}"
    env = {**os.environ, "FARM_HOME": str(home), "FARM_SHIPPED_PACKS": "0",
           "FARM_PHASED_PLAN": "1" if side == TWO else "0"}
    env.pop("FARM_REGISTRY", None)
    budget_args = ["--trials", str(budget)] if side == TWO else ["--trials-per-task", str(args.trials_per_task)]
    command = [str(Path(sys.executable).with_name("farm")), "submit", args.model, "llvm", str(args.batch),
               *budget_args, "--cold", "--registry", registry, "--json"]
    begin = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - begin
    if done.returncode != 0:
        raise SystemExit(f"error: {side} tune {n} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    trials = json.loads(done.stdout)["trials"]
    print(f"{side} {n}: {trials} trials in {wall:.0f} s", flush=True)
    return {"registry": registry, "wall_s": wall, "trials": trials, "command": " ".join(command[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--work", type=Path, default=Path("/tmp/plan-ab"))
    parser.add_argument("--reuse", action="append", default=[], metavar="SIDE-N=URL")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per engine per round")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    reused = dict(item.split("=", 1) for item in args.reuse)
    budget = plan_budget(args)
    print(f"budget: {budget} trials each side", flush=True)
    tunes: dict[str, dict] = {}
    for n in range(1, args.pairs + 1):
        for side in (ONE, TWO):
            name = f"{side}-{n}"
            done = args.work / name / "tune.json"
            if name in reused:
                tunes[name] = {"registry": reused[name], "reused": True}
            elif done.exists():
                tunes[name] = json.loads(done.read_text())
            else:
                tunes[name] = tune(side, n, budget, args)
                done.write_text(json.dumps(tunes[name]))
    built, model = {}, None
    for name, t in tunes.items():
        model, target, database = model_and_records(t["registry"], args.model, args.batch)
        built[name] = build_default_form(model, target, database)
    libraries, inputs, agreement = loaded_and_compared(built, model)
    print(f"outputs: {'agree' if agreement.passed else 'DISAGREE'} (max abs err {agreement.max_abs_err:.2e})",
          flush=True)
    whole_ms = time_with_onnxruntime(libraries, model, inputs, args.rounds, args.runs)
    ort = whole_ms["onnxruntime"]["median_ms"]
    for name, s in whole_ms.items():
        print(f"{name:<12} {s['median_ms']:8.2f} ms (p10 {s['p10_ms']:.2f}, p90 {s['p90_ms']:.2f})  "
              f"{s['median_ms'] / ort:.3f}x onnxruntime")
    pairs = [whole_ms[f"{TWO}-{n}"]["median_ms"] / whole_ms[f"{ONE}-{n}"]["median_ms"]
             for n in range(1, args.pairs + 1)]
    print(f"two / one phase, pair by pair: {', '.join(f'{r:.3f}' for r in pairs)} "
          f"(median {statistics.median(pairs):.3f}); load at the end {load_average()}")
    if args.json:
        args.json.write_text(json.dumps({**report_header(args.model, args.batch, cpu_model=cpu_model(),
                                                         trials_per_task=args.trials_per_task),
                                         "budget": budget, "tunes": tunes, "whole_ms": whole_ms,
                                         "two_over_one_by_pair": pairs, "outputs_agree": agreement.passed},
                                        indent=2))


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    main()
