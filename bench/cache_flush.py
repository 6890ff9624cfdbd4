"""Candidates timed with warm caches against timed in another context (foundation.domain.timing_context):
one model tuned from nothing in pairs, the same budget each way; every library and onnxruntime timed in
one process, interleaved.

The farm times a CPU candidate by default as calls back to back for 40 ms, everything cached after
the first (`warm`); FARM_TIMING_CONTEXT picks another: `flushed` (every argument but the first flushed
before each of ten calls), `weights` (only the weight buffers), `producer` (activations read back
warm), `l2-evicted` (the L2 alone evicted, the weights left in the L3) or `auto` (per task,
`weights` where its weights outgrow the L2). Each tune runs as `farm submit
--cold` in its own process and registry with no shipped pack (its wall time and trials kept), the sides
alternating (warm, CONTEXT, warm, ...) so a slow minute of the VM falls on both; then every library is
built from its records in the CPU's default form and all are timed with onnxruntime in rotated rounds.
The ratio is CONTEXT / warm, pair by pair: below 1 the context's measurements found the faster library.

    .venv/bin/python bench/cache_flush.py resnet-18 [--context auto] [--pairs 3] [--batch 1]
        [--trials-per-task 32] [--work /tmp/cache-flush] [--rounds 8] [--runs 5] [--json OUT]

A tune already in --work (its tune.json) is not run again: a rerun only times.
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

WARM = "warm"


def tune(context: str, name: str, args) -> dict:
    """`farm submit --cold` of the model into this tune's own registry, its candidates timed in
    ``context``; its trials and wall time."""
    from foundation.config import CPU_CACHE_FLUSH_ENV, SHIPPED_PACKS_ENV, TIMING_CONTEXT_ENV

    home = args.work / name
    home.mkdir(parents=True, exist_ok=True)
    registry = f"sqlite:///{home / 'registry.db'}"
    env = {**os.environ, "FARM_HOME": str(home), TIMING_CONTEXT_ENV: context, SHIPPED_PACKS_ENV: "0"}
    for inherited in ("FARM_REGISTRY", CPU_CACHE_FLUSH_ENV):
        env.pop(inherited, None)
    command = [str(Path(sys.executable).with_name("farm")), "submit", args.model, "llvm", str(args.batch),
               "--trials-per-task", str(args.trials_per_task), "--cold", "--registry", registry, "--json"]
    begin = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - begin
    if done.returncode != 0:
        raise SystemExit(f"error: the {name} tune exited {done.returncode}: {done.stderr.strip()[-400:]}")
    trials = json.loads(done.stdout)["trials"]
    print(f"{name}: {trials} trials in {wall:.0f} s ({trials / wall:.2f} trials/s)", flush=True)
    return {"registry": registry, "context": context, "wall_s": wall, "trials": trials, "trials_per_s": trials / wall,
            "command": " ".join(command[1:])}


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
    from foundation.domain.timing_context import CONTEXTS, TimingContext

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", default=TimingContext.FLUSHED.value,
                        choices=[c for c in CONTEXTS if c != WARM], help="the context set against warm")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=48)
    parser.add_argument("--work", type=Path, default=Path("/tmp/cache-flush"),
                        help="where each tune's FARM_HOME and registry go (kept: a rerun times them again)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per engine per round")
    parser.add_argument("--top", type=int, default=8, help="kernels listed")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    header = report_header(args.model, args.batch, cpu_model=cpu_model(), trials_per_task=args.trials_per_task,
                           context=args.context, pairs=args.pairs)
    tunes = {}
    for n in range(1, args.pairs + 1):
        for context in (WARM, args.context):
            name = f"{context}-{n}"
            done = args.work / name / "tune.json"
            if done.exists():
                tunes[name] = json.loads(done.read_text())
                print(f"{name}: tuned before ({tunes[name]['trials']} trials in {tunes[name]['wall_s']:.0f} s)")
            else:
                tunes[name] = tune(context, name, args)
                done.write_text(json.dumps(tunes[name]))
    built, model = {}, None
    for name, t in tunes.items():
        model, target, database = model_and_records(t["registry"], args.model, args.batch)
        built[name] = build_default_form(model, target, database)
    libraries, inputs, agreement = loaded_and_compared(built, model)
    print(f"outputs: {'agree' if agreement.passed else 'DISAGREE'} (max abs err {agreement.max_abs_err:.2e})",
          flush=True)
    whole_ms = time_with_onnxruntime(libraries, model, inputs, args.rounds, args.runs)
    _, kernels = time_interleaved(libraries, inputs, max(2, args.rounds // 2), args.runs)
    kernel_us = {name: {kernel: statistics.median(s) for kernel, s in kernels[name].items()} for name in libraries}
    warm_1, other_1 = kernel_us[f"{WARM}-1"], kernel_us[f"{args.context}-1"]
    moved = sorted((k for k in warm_1 if k in other_1), key=lambda k: other_1[k] - warm_1[k])
    for kernel in [*moved[:args.top // 2], *moved[-(args.top // 2):]]:
        print(f"  {kernel:<44} warm {warm_1[kernel]:9.1f} us, {args.context} {other_1[kernel]:9.1f} us (pair 1)")
    ort = whole_ms["onnxruntime"]["median_ms"]
    for name, s in whole_ms.items():
        print(f"{name:<12} {s['median_ms']:8.2f} ms (p10 {s['p10_ms']:.2f}, p90 {s['p90_ms']:.2f})  "
              f"{s['median_ms'] / ort:.3f}x onnxruntime")
    pairs = [whole_ms[f"{args.context}-{n}"]["median_ms"] / whole_ms[f"{WARM}-{n}"]["median_ms"]
             for n in range(1, args.pairs + 1)]
    print(f"{args.context} / warm, pair by pair: {', '.join(f'{r:.3f}' for r in pairs)} "
          f"(median {statistics.median(pairs):.3f}); load at the end {load_average()}")
    if args.json:
        args.json.write_text(json.dumps({**header, "tunes": tunes, "whole_ms": whole_ms,
                                         "context_over_warm_by_pair": pairs, "kernels_us": kernel_us,
                                         "outputs_agree": agreement.passed}, indent=2))


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    main()
