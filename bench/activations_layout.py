"""Blocked activations (NCHW{b}c) on this CPU: one model tuned with plain NCHW and with blocked
activations at the same budget, both with prepacked weights, then both timed in one process,
interleaved, per kernel and whole.

The forms are the product's: `--weights-layout prepacked` (plain activations) and
`prepacked-nchwc` (blocked; `--block` sets the channels per block for this process only, to try
another than the product's choice for the target: 16 with AVX-512, else 8). Each form is
tuned by the farm's embedded submit into a FARM_HOME and registry of its own (neither starts
warm from the other; their workloads are different TIR anyway), alternating which form tunes
first per seed. Before tuning, both forms are built untuned and their outputs compared, and
the layout_transform calls left in the blocked model's `main` are counted. Ratios are
blocked / plain: below 1 the blocked library is faster.

    .venv/bin/python bench/activations_layout.py [--model resnet-18] [--block 8]
        [--trials-per-task 16] [--seeds 0] [--rounds 8] [--runs 5] [--work-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import kernel_of
from prepack import cpu_name, load_average, spread, time_interleaved

FORMS = ("plain", "blocked")


# Each form as `farm submit --weights-layout` names it.
LAYOUTS = {"plain": "prepacked", "blocked": "prepacked-nchwc"}


@contextlib.contextmanager
def channels_per_block(block: int | None):
    """The product's blocked form with ``block`` channels per block instead of its choice for the
    target (None: its choice), for this process only: what `--block` tries. Each form tunes into a
    registry of its own, so a library of another block never reaches a farm that expects its own."""
    import foundation.blocked_activations as blocked_activations

    product_block = blocked_activations.BLOCK
    blocked_activations.BLOCK = block
    try:
        yield
    finally:
        blocked_activations.BLOCK = product_block


def untuned_check(model, target, block: int | None) -> dict:
    """Build both forms untuned, compare their outputs, count the blocked model's layout_transforms."""
    import numpy as np

    import foundation.compile as compile_module
    from foundation.blocked_activations import block_for, converted_activations
    from foundation.runtime.library_runner import LoadedLibrary

    plain = compile_module.build_library(model, target, prepack=True)
    with channels_per_block(block):
        block = block_for(model.mod, target)
    with target:
        converted = converted_activations(block)(compile_module._weights_marked(model))
    main = converted["main"].script()
    with channels_per_block(block):
        blocked = compile_module.build_library(model, target, prepack=True, block_activations=True)
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    outputs = []
    for library in (plain, blocked):
        loaded = LoadedLibrary(library, "llvm")
        loaded.set_weights(weights)
        outputs.append(loaded(inputs))
    return {
        "allclose": all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(*outputs)),
        "max_abs_diff": max(float(np.abs(a - b).max()) for a, b in zip(*outputs)),
        "layout_transforms_in_main": main.count("R.layout_transform("),
        "conv2d_calls": main.count("R.nn.conv2d("),
        "blocked_conv2d_calls": sum("R.nn.conv2d(" in line and f'out_layout="NCHW{block}c"' in line
                                    for line in main.splitlines()),
        "layout_transforms_between_convs": transforms_between_convs(main),
        "block": block,
    }


def transforms_between_convs(main_script: str) -> int:
    """layout_transform calls after the first conv2d and before the last one in `main`."""
    lines = main_script.splitlines()
    convs = [i for i, line in enumerate(lines) if "R.nn.conv2d(" in line]
    if not convs:
        return 0
    return sum("R.layout_transform(" in line for line in lines[convs[0]:convs[-1]])


def tune(model: str, batch: int, trials_per_task: int, seed: int, form: str, block: int, work_dir: Path) -> dict:
    from farm.embedded import submit
    from farm.submit_values import SubmitRequest

    home = work_dir / f"seed{seed}" / form
    home.mkdir(parents=True, exist_ok=True)
    os.environ["FARM_HOME"] = str(home)
    begin = time.monotonic()
    with channels_per_block(block):
        result = submit(SubmitRequest(model=model, target="llvm", batch=batch,
                                      registry=f"sqlite:///{home / 'registry.db'}", trials_per_task=trials_per_task,
                                      seed=seed, weights_layout=LAYOUTS[form], validation_runs=5))
    if result.job.state != "succeeded":
        raise SystemExit(f"error: the {form} tuning of {model} ended {result.job.state}: {result.job.error}")
    report = result.report
    return {
        "form": form, "seed": seed, "home": str(home), "job": result.artifact.job_id,
        "artifact": result.artifact.id, "cache_hit": result.cache_hit,
        "trials": report.trials if report else None, "seconds": round(time.monotonic() - begin, 1),
        "load_after": load_average(),
        "tasks": {t.name: {"weight": t.weight, "trials": t.trials,
                           "tuning_best_us": (t.best_sec or 0.0) * 1e6 or None} for t in report.tasks}
        if report else {},
    }


def measure_seed(args, seed: int, work_dir: Path) -> dict:
    from foundation.models.loading import load_model
    from foundation.registry.store import RegistryStore
    from foundation.runtime.library_runner import LoadedLibrary
    from foundation.runtime.validation import compare_outputs

    order = FORMS if seed % 2 == 0 else tuple(reversed(FORMS))
    tuned = {}
    for form in (f for f in order if f in args.tune):
        print(f"seed {seed}: tuning {args.model} b{args.batch} {form} activations, {args.trials_per_task} "
              f"trials/task (load {load_average()})", flush=True)
        tuned[form] = tune(args.model, args.batch, args.trials_per_task, seed, form, args.block, work_dir)
        done = "a registry hit" if tuned[form]["cache_hit"] else f"{tuned[form]['trials']} trials"
        print(f"  {done} in {tuned[form]['seconds']:.0f} s", flush=True)
    if set(tuned) != set(FORMS):
        return {"seed": seed, "tuning": tuned}
    model = load_model(args.model, args.batch)
    weights, inputs = model.make_weights(seed), model.make_inputs(seed)
    libraries = {}
    for form in FORMS:
        store = RegistryStore(f"sqlite:///{Path(tuned[form]['home']) / 'registry.db'}")
        library = LoadedLibrary(store.get_artifact_library(tuned[form]["artifact"]), "llvm")
        store.dispose()
        library.set_weights(weights)
        libraries[form] = library
    agreement = compare_outputs(libraries["blocked"](inputs), libraries["plain"](inputs))
    if not agreement.passed:
        raise SystemExit(f"error: the blocked and plain libraries disagree: {agreement.reason}")
    print(f"seed {seed}: timing, {args.rounds} rounds x {args.runs} runs each (load {load_average()})", flush=True)
    whole, kernels = time_interleaved(libraries, inputs, args.rounds, args.runs)
    per_kernel = {f: {name: spread(samples) for name, samples in kernels[f].items()} for f in FORMS}
    whole_ms = {f: spread(whole[f]) for f in FORMS}
    return {"seed": seed, "tuning": tuned, "kernels_us": per_kernel, "whole_ms": whole_ms,
            "ratio": whole_ms["blocked"]["median"] / whole_ms["plain"]["median"],
            "max_abs_diff": agreement.max_abs_err, "load_after": load_average()}


def tuned_kernels(form: str, block: int, home: Path, model) -> dict:
    """The conv2d tasks of one form that its registry holds a record for, each built alone from
    its best record: {plain task name: (weight, flop, evaluator, arguments)}."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    import foundation.compile as compile_module
    from farm.session import open_context
    from foundation.meta_schedule.database.registry_database import tvm_database_for

    os.environ["FARM_HOME"] = str(home)
    ctx = open_context(f"sqlite:///{home / 'registry.db'}", "llvm")
    target = ctx.tvm_target()
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    with channels_per_block(block):
        tasks = compile_module.extract_tuning_tasks(model, target, prepack=True,
                                                    block_activations=form == "blocked")
    kernels = {}
    device = tvm.cpu()
    for task in tasks:
        if "conv2d" not in task.name:
            continue
        schedule = database.query_schedule(task.mod, target, "main")
        if schedule is None:
            continue
        kernel = kernel_of(schedule.mod)  # without the weights' rearrangement, done once at load
        executable = tvm.compile(kernel, target=target)
        args = [tvm.runtime.tensor(np.zeros([int(d) for d in info.shape], str(info.dtype)), device)
                for info in ms.arg_info.ArgInfo.from_prim_func(kernel["main"])]
        evaluator = executable.mod.time_evaluator("main", device, number=1, repeat=3, min_repeat_ms=20)
        kernels[task.name.replace("conv2d_NCHWc", "conv2d")] = (task.weight, task.flop, evaluator, args, executable)
    ctx.store.dispose()
    return kernels


def compare_kernels(args, seed: int, work_dir: Path) -> dict:
    """Each conv2d task both forms tuned, built from each form's best record and timed alone, the
    two forms interleaved: a kernel-level ratio for runs that could not tune every task."""
    import numpy as np

    from foundation.models.loading import load_model

    model = load_model(args.model, args.batch)
    kernels = {form: tuned_kernels(form, args.block, work_dir / f"seed{seed}" / form, model) for form in FORMS}
    common = sorted(set(kernels["plain"]) & set(kernels["blocked"]))
    samples = {name: {f: [] for f in FORMS} for name in common}
    print(f"seed {seed}: {len(common)} conv2d tasks tuned in both forms (plain {len(kernels['plain'])}, blocked "
          f"{len(kernels['blocked'])}); timing them alone, {args.rounds} rounds (load {load_average()})", flush=True)
    for r in range(args.rounds):
        for name in common:
            for form in (FORMS if r % 2 == 0 else tuple(reversed(FORMS))):
                _, _, evaluator, call_args, _ = kernels[form][name]
                samples[name][form].append(float(np.median(evaluator(*call_args).results)) * 1e6)
    rows = []
    for name in common:
        weight, flop = kernels["plain"][name][0], kernels["plain"][name][1]
        us = {f: spread(samples[name][f]) for f in FORMS}
        rows.append({"task": name, "weight": weight, "gflop": flop / 1e9, "us": us,
                     "ratio": us["blocked"]["median"] / us["plain"]["median"]})
    total = {f: sum(r["weight"] * r["us"][f]["median"] for r in rows) for f in FORMS}
    return {"seed": seed, "kernels": rows, "weighted_us": total,
            "kernel_ratio": total["blocked"] / total["plain"] if total["plain"] else None,
            "load_after": load_average()}


def print_kernels(result: dict) -> None:
    print(f"\n  {'conv2d task (plain name)':<46} {'w':>2} {'GFLOP':>6} {'plain us':>10} {'blocked us':>11} "
          f"{'ratio':>6}")
    for row in sorted(result["kernels"], key=lambda r: -r["weight"] * r["us"]["plain"]["median"]):
        print(f"  {row['task']:<46} {row['weight']:>2} {row['gflop']:6.3f} {row['us']['plain']['median']:10.1f} "
              f"{row['us']['blocked']['median']:11.1f} {row['ratio']:6.2f}")
    w = result["weighted_us"]
    if result["kernel_ratio"] is not None:
        print(f"  weighted by calls: plain {w['plain'] / 1e3:.2f} ms, blocked {w['blocked'] / 1e3:.2f} ms: "
              f"ratio blocked/plain {result['kernel_ratio']:.3f}")


def print_seed(result: dict) -> None:
    for form in FORMS:
        rows = sorted(result["kernels_us"][form].items(), key=lambda kv: -kv[1]["median"])
        total = sum(s["median"] for _, s in rows)
        print(f"\nseed {result['seed']}, {form}: kernels by time per inference (median us; sum {total / 1e3:.2f} ms)")
        for name, s in rows[:12]:
            print(f"  {name:<52} {s['median']:10.1f}")
    w = result["whole_ms"]
    print(f"\nwhole model: plain {w['plain']['median']:.2f} ms (p10 {w['plain']['p10']:.2f}, p90 "
          f"{w['plain']['p90']:.2f}), blocked {w['blocked']['median']:.2f} ms (p10 {w['blocked']['p10']:.2f}, "
          f"p90 {w['blocked']['p90']:.2f}): ratio blocked/plain {result['ratio']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--block", type=int, default=None,
                        help="channels per block (default: the product's for this CPU, 16 with AVX-512, else 8)")
    parser.add_argument("--trials-per-task", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5, help="runs per library per round")
    parser.add_argument("--check", choices=("only", "skip", "first"), default="first",
                        help="the untuned correctness check: only it, skip it, or first (default)")
    parser.add_argument("--tune", nargs="+", choices=FORMS, default=list(FORMS),
                        help="forms to tune (the others' libraries are not timed): two processes tuning one "
                             "form each into the same --work-dir tune both under the same load; a third "
                             "run with both forms then finds both in the registries and times them")
    parser.add_argument("--kernels", action="store_true",
                        help="time the conv2d kernels both forms' registries in --work-dir hold, alone, "
                             "interleaved (no tuning, no whole model)")
    parser.add_argument("--work-dir", type=Path, default=None, help="FARM_HOMEs of the runs (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

    install_lean_tensor_intrinsics("llvm")
    pin_tvm_threads()
    header = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpu": cpu_name(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load_average(), "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        "model": args.model, "batch": args.batch, "block": args.block, "trials_per_task": args.trials_per_task,
    }
    print(f"{header['cpu']}, {header['cores']} CPUs, {header['date']}, load {header['load_before']}", flush=True)
    from foundation.models.loading import load_model

    model = load_model(args.model, args.batch)
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.targets import canonical_target, to_tvm_target

    target = to_tvm_target(canonical_target("llvm", local_fingerprint("llvm")))  # as the farm tunes here
    check = untuned_check(model, target, args.block) if args.check != "skip" else None
    if check:
        print(f"untuned builds, {check['block']} channels per block: blocked equals plain: {check['allclose']} "
              f"(max abs diff {check['max_abs_diff']:.3g}); {check['blocked_conv2d_calls']} of "
              f"{check['conv2d_calls']} conv2d blocked; layout_transform calls left in main: "
              f"{check['layout_transforms_in_main']}, "
              f"{check['layout_transforms_between_convs']} of them between the first conv2d and the last",
              flush=True)
    if check and not check["allclose"]:
        raise SystemExit("error: the untuned blocked build disagrees with the plain one")
    results = []
    if args.kernels:
        for seed in args.seeds:
            results.append(compare_kernels(args, seed, args.work_dir))
            print_kernels(results[-1])
    elif args.check != "only":
        keep = args.work_dir is not None
        work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="farm-nchwc-"))
        for seed in args.seeds:
            results.append(measure_seed(args, seed, work_dir))
            if "ratio" in results[-1]:
                print_seed(results[-1])
        ratios = ", ".join(f"{r['ratio']:.3f}" for r in results if "ratio" in r)
        print(f"\nwhole-model ratio blocked/plain per seed: {ratios}; "
              f"load at the end {load_average()}")
        if not keep:
            import shutil

            shutil.rmtree(work_dir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({**header, "load_after": load_average(), "untuned_check": check,
                                         "seeds": results}, indent=1))


if __name__ == "__main__":
    main()
