"""Weight prepacking on this CPU: one model tuned with plain and with prepacked weights at the
same budget, then both timed in one process, interleaved, per kernel and whole.

For each seed the farm's embedded submit tunes the model twice, once per form of weights, on
a registry of the seed's own (neither form starts warm from anything), alternating which form
tunes first so that a drift in the box's load does not always fall on the same one. Then both
validated libraries are loaded here with the same plain weights (a prepacked library
rearranges them once, as `farm.load` does), their outputs compared, and timed in rounds whose
order is rotated:
- whole model: `main` on device-resident arguments, synchronised, as `farm run` times it;
- per kernel: a second VM over the same library with the VM's instrument hook timing every
  call; a kernel's time per inference is the sum over its calls (a task's weight).
Ratios are prepacked / plain: below 1 the prepacked library is faster.

    .venv/bin/python bench/prepack.py [--model resnet-18] [--batch 1] [--trials-per-task 16]
        [--seeds 0] [--rounds 8] [--runs 5] [--work-dir DIR] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FORMS = ("plain", "prepacked")


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def tune(model: str, batch: int, trials_per_task: int, seed: int, form: str, registry: str) -> dict:
    from farm.embedded import submit
    from farm.submit_values import SubmitRequest

    begin = time.monotonic()
    result = submit(SubmitRequest(model=model, target="llvm", batch=batch, registry=registry,
                                  trials_per_task=trials_per_task, seed=seed, weights_layout=form,
                                  validation_runs=5))
    if result.job.state != "succeeded":
        raise SystemExit(f"error: the {form} tuning of {model} ended {result.job.state}: {result.job.error}")
    # A registry hit (a run that stopped after tuning this form, rerun on the same --work-dir)
    # has no tuning report: its per-task tuning figures are left out.
    report = result.report
    return {
        "form": form, "seed": seed, "job": result.artifact.job_id, "artifact": result.artifact.id,
        "cache_hit": result.cache_hit, "trials": report.trials if report else None,
        "seconds": round(time.monotonic() - begin, 1), "load_after": load_average(),
        "tasks": {t.name: {"weight": t.weight, "trials": t.trials,
                           "tuning_best_us": (t.best_sec or 0.0) * 1e6 or None} for t in report.tasks}
        if report else {},
    }


class KernelClock:
    """Times every kernel call of a VM over the library (the VM's instrument hook)."""

    def __init__(self, library):
        from tvm import relax

        self.vm = relax.VirtualMachine(library.module, library.device)
        self.per_call: dict[str, float] = defaultdict(float)
        started: dict[str, float] = {}

        def instrument(func, name, before_run, ret_value, *args):
            if before_run:
                started[name] = time.perf_counter()
            else:
                self.per_call[name] += time.perf_counter() - started.pop(name)
            return 0

        self.vm.set_instrument(instrument)

    def one_inference(self, args) -> dict[str, float]:
        """Seconds per kernel (summed over its calls) of one inference; VM builtins left out."""
        self.per_call.clear()
        self.vm["main"](*args)
        return {name: sec for name, sec in self.per_call.items() if not name.startswith("vm.builtin.")}


def time_interleaved(libraries: dict, inputs, rounds: int, runs: int) -> tuple[dict, dict]:
    """Whole-model samples (ms) and per-kernel samples (us) of each library, order rotated per round."""
    whole: dict[str, list[float]] = {f: [] for f in libraries}
    kernels: dict[str, dict[str, list[float]]] = {f: defaultdict(list) for f in libraries}
    prepared = {f: (lib, lib.device_arguments(inputs), KernelClock(lib)) for f, lib in libraries.items()}
    for lib, args, clock in prepared.values():  # warm-up: first calls page code in, fill caches
        for _ in range(2):
            lib.vm["main"](*args)
            clock.one_inference(args)
    order = list(libraries)
    for r in range(rounds):
        for f in order[r % 2:] + order[:r % 2]:
            lib, args, clock = prepared[f]
            main = lib.vm["main"]
            for _ in range(runs):
                begin = time.perf_counter()
                main(*args)
                lib.device.sync()
                whole[f].append((time.perf_counter() - begin) * 1e3)
            for _ in range(runs):
                for name, sec in clock.one_inference(args).items():
                    kernels[f][name].append(sec * 1e6)
    return whole, kernels


def plain_name(prepacked_name: str, plain_names: set[str]) -> str:
    """The plain counterpart of a prepacked task or kernel: AttachAttrLayoutFreeBuffers gives every
    function it copies a new name, the old one with "1" appended, and SplitLayoutRewritePreproc
    appends "_prepacked" to the kernels whose weights it split out."""
    name = prepacked_name.removesuffix("_prepacked")
    if name.endswith("1") and name[:-1] in plain_names:
        return name[:-1]
    return name


def spread(samples: list[float]) -> dict:
    q = statistics.quantiles(samples, n=10) if len(samples) >= 2 else [samples[0]] * 9
    return {"median": statistics.median(samples), "p10": q[0], "p90": q[-1], "n": len(samples)}


def measure_seed(args, seed: int, work_dir: Path) -> dict:
    from foundation.models.loading import load_model
    from foundation.registry.store import RegistryStore
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.validation import compare_outputs

    registry = f"sqlite:///{work_dir / f'seed{seed}' / 'registry.db'}"
    (work_dir / f"seed{seed}").mkdir(parents=True, exist_ok=True)
    order = FORMS if seed % 2 == 0 else tuple(reversed(FORMS))
    tuned = {}
    for form in order:
        print(f"seed {seed}: tuning {args.model} b{args.batch} {form}, {args.trials_per_task} trials/task "
              f"(load {load_average()})", flush=True)
        tuned[form] = tune(args.model, args.batch, args.trials_per_task, seed, form, registry)
        done = "a registry hit (tuned by an earlier run)" if tuned[form]["cache_hit"] else \
            f"{tuned[form]['trials']} trials"
        print(f"  {done} in {tuned[form]['seconds']:.0f} s", flush=True)
    store = RegistryStore(registry)
    model = load_model(args.model, args.batch)
    weights, inputs = model.make_weights(seed), model.make_inputs(seed)
    libraries = {}
    for form in FORMS:
        library = LoadedLibrary(store.get_artifact_library(tuned[form]["artifact"]), "llvm")
        library.set_weights(weights)
        libraries[form] = library
    store.dispose()
    assert libraries["prepacked"].prepacked and not libraries["plain"].prepacked
    agreement = compare_outputs(libraries["prepacked"](inputs), libraries["plain"](inputs))
    if not agreement.passed:
        raise SystemExit(f"error: the prepacked and plain libraries disagree: {agreement.reason}")
    print(f"seed {seed}: timing, {args.rounds} rounds x {args.runs} runs each (load {load_average()})", flush=True)
    whole, kernels = time_interleaved(libraries, inputs, args.rounds, args.runs)
    plain_names = set(tuned["plain"]["tasks"]) | set(kernels["plain"])
    task_of = {"plain": tuned["plain"]["tasks"],
               "prepacked": {plain_name(n, plain_names): t for n, t in tuned["prepacked"]["tasks"].items()}}
    kernels["prepacked"] = {plain_name(n, plain_names): k for n, k in kernels["prepacked"].items()}
    tasks = []
    for name in sorted(set(task_of["plain"]) | set(task_of["prepacked"]) | set(kernels["plain"])):
        weight = next((task_of[f][name]["weight"] for f in FORMS if name in task_of[f]), None)
        row = {"task": name, "weight": weight,
               "tuning_best_us": {f: task_of[f].get(name, {}).get("tuning_best_us") for f in FORMS}}
        timed = {f: kernels[f].get(name) for f in FORMS}
        if all(timed.values()):
            row["kernel_us"] = {f: spread(timed[f]) for f in FORMS}
            row["ratio"] = row["kernel_us"]["prepacked"]["median"] / row["kernel_us"]["plain"]["median"]
        tasks.append(row)
    whole_ms = {f: spread(whole[f]) for f in FORMS}
    return {"seed": seed, "tuning": tuned, "tasks": tasks, "whole_ms": whole_ms,
            "ratio": whole_ms["prepacked"]["median"] / whole_ms["plain"]["median"],
            "max_abs_diff": agreement.max_abs_err, "load_after": load_average()}


def print_seed(result: dict) -> None:
    print(f"\nseed {result['seed']}: per task (kernel time per inference, median of interleaved runs; "
          "ratio = prepacked / plain)")
    print(f"  {'task':<44} {'w':>2} {'plain us':>10} {'prepacked us':>13} {'ratio':>6}   "
          "tuning best plain/prepacked us")
    rows = sorted(result["tasks"], key=lambda r: -(r.get("kernel_us", {}).get("plain", {}).get("median", 0)))
    for row in rows:
        best = row["tuning_best_us"]
        tuning = f"{best['plain'] or 0:10.1f} / {best['prepacked'] or 0:.1f}"
        if "kernel_us" in row:
            k = row["kernel_us"]
            print(f"  {row['task']:<44} {row['weight'] or '':>2} {k['plain']['median']:10.1f} "
                  f"{k['prepacked']['median']:13.1f} {row['ratio']:6.2f}   {tuning}")
        else:
            print(f"  {row['task']:<44} {row['weight'] or '':>2} {'(not a kernel of both libraries)':>30}   {tuning}")
    w = result["whole_ms"]
    print(f"  whole model: plain {w['plain']['median']:.2f} ms (p10 {w['plain']['p10']:.2f}, p90 "
          f"{w['plain']['p90']:.2f}), prepacked {w['prepacked']['median']:.2f} ms (p10 {w['prepacked']['p10']:.2f}, "
          f"p90 {w['prepacked']['p90']:.2f}): ratio {result['ratio']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per library per round")
    parser.add_argument("--work-dir", type=Path, default=None, help="registries of the runs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    header = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpu": cpu_name(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load_average(), "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        "model": args.model, "batch": args.batch, "trials_per_task": args.trials_per_task,
    }
    print(f"{header['cpu']}, {header['cores']} CPUs, {header['date']}, load {header['load_before']}", flush=True)
    keep = args.work_dir is not None
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="farm-prepack-"))
    os.environ.setdefault("FARM_HOME", str(work_dir / "home"))
    results = []
    for seed in args.seeds:
        results.append(measure_seed(args, seed, work_dir))
        print_seed(results[-1])
    ratios = [r["ratio"] for r in results]
    print(f"\nwhole-model ratio prepacked/plain per seed: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"load at the end {load_average()}")
    if args.json:
        args.json.write_text(json.dumps({**header, "load_after": load_average(), "seeds": results}, indent=1))
    if not keep:
        import shutil

        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
