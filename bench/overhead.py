"""Farm overhead: trials per second of the farm's tuner against plain `ms.tune_tasks`.

Same task, same budget, same lean-intrinsic workers (TVM's default builder fails every build
on this machine, so it is no baseline). The farm adds the SQL registry as MetaSchedule's
database, live progress, and the build clock. Each run is a fresh subprocess; runs
alternate plain/farm to spread machine noise.

    .venv/bin/python bench/overhead.py [--trials 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, LeanWorkerInit
install_lean_tensor_intrinsics("llvm")
import tvm
from tvm.s_tir import meta_schedule as ms
from foundation.compile import extract_tuning_tasks
from foundation.models.loading import load_model

mode, trials, home = sys.argv[1], int(sys.argv[2]), sys.argv[3]
target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
task = max(extract_tuning_tasks(load_model("resnet-tiny", 1), target), key=lambda t: t.flop)
work = Path(tempfile.mkdtemp())
if mode == "plain":
    ctx = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                         search_strategy="evolutionary", task_name=task.name, num_threads="physical")
    builder = ms.builder.LocalBuilder(timeout_sec=120, initializer=LeanWorkerInit("llvm"))
    runner = ms.runner.LocalRunner(timeout_sec=60, initializer=LeanWorkerInit("llvm"),
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=40, enable_cpu_cache_flush=False))
    db = ms.database.JSONDatabase(work_dir=str(work))
    begin = time.monotonic()
    ms.tune_tasks(tasks=[ctx], task_weights=[1.0], work_dir=str(work), max_trials_global=trials,
                  max_trials_per_task=trials, num_trials_per_iter=16, builder=builder, runner=runner,
                  database=db, cost_model="xgb")
    seconds = time.monotonic() - begin
    done = len(db)
else:
    from foundation.meta_schedule.tuner import TuningBudget, tune
    from foundation.registry.store import RegistryStore
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    store = RegistryStore(f"sqlite:///{home}/registry.db")
    store.upsert_fingerprint("cpu-bench", "cpu", "bench", {})
    db = tvm_database_for(store, "cpu-bench", '{"kind":"llvm","num-cores":2}', tvm.__version__, {})
    begin = time.monotonic()
    report = tune([task], target, db, TuningBudget(trials, trials, 16), work)
    seconds = time.monotonic() - begin
    done = report.trials
print(json.dumps({"mode": mode, "task": task.name, "trials": done, "seconds": seconds}))
"""


def run(mode: str, trials: int) -> dict:
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(trials), home],
                              capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"plain": [], "farm": []}
    for _ in range(args.rounds):
        for mode in ("plain", "farm"):
            r = run(mode, args.trials)
            rate = r["trials"] / r["seconds"]
            rates[mode].append(rate)
            print(f"{mode:<5} {r['task']}: {r['trials']} trials in {r['seconds']:.1f} s = {rate:.2f} trials/s")
    plain, farm = statistics.median(rates["plain"]), statistics.median(rates["farm"])
    print(f"median trials/s: plain ms.tune_tasks {plain:.2f}, farm {farm:.2f}; farm/plain = {farm / plain:.2f}x")


if __name__ == "__main__":
    main()
