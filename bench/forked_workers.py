"""What forking the builder and runner workers saves: whole `farm submit` processes, in rotating
rounds of three: workers forked from a zygote that is itself a fork of the farm process (the
default), from a zygote started as a new Python (`FARM_FORK_ZYGOTE=0`), and TVM's own workers
(`FARM_FORK_WORKERS=0`).

Each run is a fresh `farm submit MODEL llvm BATCH --trials N` into a fresh FARM_HOME (so never a
registry hit), timed from outside: wall time, and CPU time of the process and everything it reaped
(its workers, or its zygote, which reaps its forks). Prints each variant's medians and the
ratios round by round; the figures go in docs/benchmarks.md ("Workers forked from one import").

    .venv/bin/python bench/forked_workers.py [--model mlp-tiny --batch 1 --trials 16 --rounds 5] [--json]

With --timings instead: the same candidates (the untuned forms of resnet-tiny's first three tasks)
built and timed by forked workers and by TVM's own, alternating, three rounds: a forked runner
must time a kernel as TVM's own does.

    .venv/bin/python bench/forked_workers.py --timings

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
# Each variant's environment for `farm submit`.
VARIANTS = {"forked": {}, "zygote": {"FARM_FORK_ZYGOTE": "0"}, "tvm": {"FARM_FORK_WORKERS": "0"}}
TIMING_VARIANTS = {"forked": "1", "tvm": "0"}  # FARM_FORK_WORKERS, in this process


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def one_submit(variant: dict[str, str], model: str, batch: int, trials: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="farm-bench-fork-") as home:
        switches = ("FARM_FORK_WORKERS", "FARM_FORK_ZYGOTE")
        env = {name: value for name, value in os.environ.items() if name not in switches}
        env.update(variant, FARM_HOME=home)
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


def same_timings(rounds: int = 3) -> None:
    """Each candidate's median time (us) as each kind of worker measured it."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from foundation.compile import extract_tuning_tasks
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
    from foundation.models.loading import load_model

    target = tvm.target.Target({"kind": "llvm", "num-cores": os.cpu_count() or 1})
    tasks = [t for t in extract_tuning_tasks(load_model("resnet-tiny", 1), target) if t.flop > 0][:3]
    timings: dict[str, list[list[float]]] = {name: [] for name in TIMING_VARIANTS}
    for _ in range(rounds):
        for name, fork in TIMING_VARIANTS.items():
            os.environ["FARM_FORK_WORKERS"] = fork
            with WorkerPools(MeasureSettings()) as pools:
                builder, runner = pools.get("llvm")
                built = builder.build([ms.builder.BuilderInput(t.mod, target) for t in tasks])
                args = [ms.arg_info.ArgInfo.from_prim_func(t.mod["main"]) for t in tasks]
                inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu", a) for b, a in zip(built, args)]
                timings[name].append([float(f.result().run_secs[0]) * 1e6 for f in runner.run(inputs)])
    print(f"{cpu_model()}, {time.strftime('%Y-%m-%d')}: median of {rounds} rounds, us")
    print(f"{'workers':<8} " + " ".join(f"{t.name[:24]:>26}" for t in tasks))
    for name in TIMING_VARIANTS:
        print(f"{name:<8} " + " ".join(f"{statistics.median(r[i] for r in timings[name]):>26.2f}"
                                         for i in range(len(tasks))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp-tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--timings", action="store_true", help="compare what each kind of worker times, then stop")
    args = parser.parse_args()
    if args.timings:
        same_timings()
        return

    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    for round_ in range(args.rounds + 1):  # the first round warms the page cache, not counted
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:  # each goes first in turn
            result = one_submit(VARIANTS[name], args.model, args.batch, args.trials)
            if round_:
                runs[name].append(result)
            print(f"round {round_}{' (warm-up)' if not round_ else ''} {name}: {result['wall_s']:.2f} s wall, "
                  f"{result['cpu_s']:.2f} CPU-s", file=sys.stderr)

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    ratios = {f"forked/{other}": {key: statistics.median(f[key] / o[key] for f, o in zip(runs["forked"], runs[other]))
                                  for key in ("wall_s", "cpu_s")}
              for other in ("zygote", "tvm")}
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
           "command": f"farm submit {args.model} llvm {args.batch} --trials {args.trials}", "rounds": args.rounds,
           "median": {name: {"wall_s": median(name, "wall_s"), "cpu_s": median(name, "cpu_s")} for name in VARIANTS},
           "ratios": ratios, "runs": runs}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['command']}, {args.rounds} rounds, {out['cpu']} ({out['cores']} cores), {out['date']}")
    print(f"{'workers':<8} {'wall s':>8} {'CPU s':>8}")
    for name in VARIANTS:
        print(f"{name:<8} {median(name, 'wall_s'):>8.2f} {median(name, 'cpu_s'):>8.2f}")
    for pair, ratio in ratios.items():
        print(f"{pair} (median of rounds): wall {ratio['wall_s']:.2f}, CPU {ratio['cpu_s']:.2f}")


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    main()
