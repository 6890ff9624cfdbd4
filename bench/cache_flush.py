"""Candidates timed with warm caches against timed with their weights flushed: one model tuned twice
from nothing, the same budget, each way; both libraries and onnxruntime timed in one process,
interleaved.

The farm times a CPU candidate by default as calls back to back for 40 ms, everything cached
after the first; with FARM_CPU_CACHE_FLUSH=1 each of ten calls runs after TVM flushes the weights
and output from the caches (foundation.meta_schedule.measure.MeasureSettings), as inside a model
whose weights outgrow the caches. Each tune runs as `farm submit` in its own process and registry
(its wall time and trials kept); then the two libraries are built from their records in the CPU's
default form and timed with onnxruntime in rotated rounds. The ratio is flushed / warm: below 1
the flushed measurements found the faster library.

    .venv/bin/python bench/cache_flush.py bert [--batch 1] [--trials-per-task 48] [--work /tmp/cache-flush]
        [--rounds 8] [--runs 5] [--json OUT]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _same_records import build_default_form, loaded_and_compared, model_and_records, report_header
from prepack import load_average, time_interleaved
from timing import Engine, cpu_model, interleaved

SIDES = {"warm": "0", "flushed": "1"}  # FARM_CPU_CACHE_FLUSH of each tune


def tune(side: str, args) -> dict:
    """`farm submit` of the model into this side's own registry; its --json document and wall time."""
    from foundation.config import CPU_CACHE_FLUSH_ENV

    home = args.work / side
    registry = f"sqlite:///{home / 'registry.db'}"
    env = {**os.environ, "FARM_HOME": str(home), CPU_CACHE_FLUSH_ENV: SIDES[side]}
    env.pop("FARM_REGISTRY", None)
    command = [str(Path(sys.executable).with_name("farm")), "submit", args.model, "llvm", str(args.batch),
               "--trials-per-task", str(args.trials_per_task), "--registry", registry, "--json"]
    begin = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - begin
    if done.returncode != 0:
        raise SystemExit(f"error: the {side} tune exited {done.returncode}: {done.stderr.strip()[-400:]}")
    document = json.loads(done.stdout)
    trials = document["trials"]
    print(f"{side}: {trials} trials in {wall:.0f} s ({trials / wall:.2f} trials/s)", flush=True)
    return {"registry": registry, "wall_s": wall, "trials": trials, "trials_per_s": trials / wall}


def time_with_onnxruntime(libraries: dict, model, inputs, rounds: int, runs: int) -> dict[str, dict]:
    """Each library and onnxruntime timed in rotated rounds (timing.interleaved): their summaries."""
    from evaluate import ort_engine

    ort, why = ort_engine(model, model.make_weights(0), "llvm")
    if ort is None:
        raise SystemExit(f"error: {why}")
    engines = [*(Engine(name, run=library) for name, library in libraries.items()), ort]
    samples = interleaved(engines, inputs, runs=rounds * runs, warmup=2, rounds=rounds)
    return {name: s.summary() for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=48)
    parser.add_argument("--work", type=Path, default=Path("/tmp/cache-flush"),
                        help="where each side's FARM_HOME and registry go (kept: a rerun times them again)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per engine per round")
    parser.add_argument("--top", type=int, default=8, help="kernels listed")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    header = report_header(args.model, args.batch, cpu_model=cpu_model(), trials_per_task=args.trials_per_task)
    tunes = {}
    for side in SIDES:
        done = args.work / side / "tune.json"
        if done.exists():
            tunes[side] = json.loads(done.read_text())
            print(f"{side}: tuned before ({tunes[side]['trials']} trials in {tunes[side]['wall_s']:.0f} s)")
        else:
            tunes[side] = tune(side, args)
            done.write_text(json.dumps(tunes[side]))
    built, model = {}, None
    for side in SIDES:
        model, target, database = model_and_records(tunes[side]["registry"], args.model, args.batch)
        built[side] = build_default_form(model, target, database)
    libraries, inputs, agreement = loaded_and_compared(built, model)
    print(f"outputs: {'agree' if agreement.passed else 'DISAGREE'} (max abs err {agreement.max_abs_err:.2e})",
          flush=True)
    whole_ms = time_with_onnxruntime(libraries, model, inputs, args.rounds, args.runs)
    _, kernels = time_interleaved(libraries, inputs, max(2, args.rounds // 2), args.runs)
    kernel_us = {f: {name: statistics.median(s) for name, s in kernels[f].items()} for f in libraries}
    common = [n for n in kernel_us["warm"] if n in kernel_us["flushed"]]
    moved = sorted(common, key=lambda n: kernel_us["flushed"][n] - kernel_us["warm"][n])
    for name in [*moved[:args.top // 2], *moved[-(args.top // 2):]]:
        print(f"  {name:<44} warm {kernel_us['warm'][name]:9.1f} us, flushed {kernel_us['flushed'][name]:9.1f} us")
    ort = whole_ms["onnxruntime"]["median_ms"]
    for name, s in whole_ms.items():
        print(f"{name:<12} {s['median_ms']:8.2f} ms (p10 {s['p10_ms']:.2f}, p90 {s['p90_ms']:.2f})  "
              f"{s['median_ms'] / ort:.3f}x onnxruntime")
    ratio = whole_ms["flushed"]["median_ms"] / whole_ms["warm"]["median_ms"]
    print(f"flushed / warm: {ratio:.3f}; load at the end {load_average()}")
    if args.json:
        args.json.write_text(json.dumps({**header, "tunes": tunes, "whole_ms": whole_ms, "flushed_over_warm": ratio,
                                         "kernels_us": kernel_us, "outputs_agree": agreement.passed}, indent=2))


if __name__ == "__main__":
    main()
