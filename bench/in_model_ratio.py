"""Each heavy kernel's time inside the model against its time alone, for tuned libraries side by side:
the ratio that timing candidates in the model's context (FARM_TIMING_CONTEXT) is meant to bring to 1.

A SIDE is a registry holding the model's records (`--side NAME=URL`), or a tune this script runs
itself (`--tune TRIALS_PER_TASK --contexts warm,auto`): `farm submit` in its own FARM_HOME with
FARM_TIMING_CONTEXT set to the side's context (kept under --work: a rerun only times again). Each
side's model is built from its records in the CPU's default form, then
- run with the Relax VM's instrument timing every kernel call (foundation.job_driver.in_model_times):
  each task's time in one inference, per call;
- each task's best record built alone and timed on seeded random arguments, back to back
  (`warm`: TVM's time_evaluator, 50 ms a repeat) and in the side's own context (what its tuner saw:
  one call a repeat after the flush, foundation.meta_schedule.timing_context).
For the tasks over --min-share of the model's instrumented time it prints in-model / alone for both
alone timings, and how many kernels are within 1.15x (issue 55's goal). The sides are timed one
after the other: run it on a quiet box, and compare ratios, not milliseconds, across runs.

    FARM_HOME=... .venv/bin/python bench/in_model_ratio.py resnet-18 --side default=sqlite:///A.db \\
        --side model=sqlite:///B.db [--batch 1] [--runs 20] [--repeat 5] [--min-share 0.05] [--out F.json]
    .venv/bin/python bench/in_model_ratio.py resnet-18 --tune 32 --contexts warm,auto --work /tmp/in-model

Exit codes: 0 done; 2 bad arguments; 3 a side's registry without records of the model; 4 a registry
that cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402

TARGET = "llvm"
GOAL_RATIO = 1.15


def tune_side(name: str, context: str, args) -> str:
    """`farm submit` of the model into this side's own registry with FARM_TIMING_CONTEXT=``context``;
    the registry's URL (a side tuned before is kept)."""
    from foundation.config import TIMING_CONTEXT_ENV

    home = args.work / name
    registry = f"sqlite:///{home / 'registry.db'}"
    done_file = home / "tune.json"
    if done_file.exists():
        print(f"{name}: tuned before ({json.loads(done_file.read_text())['trials']} trials)", file=sys.stderr)
        return registry
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FARM_HOME": str(home), TIMING_CONTEXT_ENV: context}
    env.pop("FARM_REGISTRY", None)
    command = [str(Path(sys.executable).with_name("farm")), "submit", args.model, TARGET, str(args.batch),
               "--trials-per-task", str(args.tune), "--registry", registry, "--json"]
    begin = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the {name} tune exited {done.returncode}: {done.stderr.strip()[-400:]}")
    trials = json.loads(done.stdout)["trials"]
    done_file.write_text(json.dumps({"trials": trials, "wall_s": time.monotonic() - begin, "context": context}))
    print(f"{name}: {trials} trials, candidates timed {context}", file=sys.stderr, flush=True)
    return registry


def alone_ms(mod, target, timing, repeat: int) -> float:
    """Median ms of one call of the scheduled kernel ``mod`` built alone, timed as ``timing``
    (foundation.domain.timing_context.TaskTiming: its context, never auto, and the task's weights)
    says, on seeded random arguments."""
    import tvm
    from kernels import _random, kernel_of
    from tvm.s_tir import meta_schedule as ms

    from foundation.domain.timing_context import TimingContext
    from foundation.meta_schedule.timing_context import evaluator_for

    mod = kernel_of(mod)
    executable = tvm.compile(mod, target=target)
    device = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(_random(rng, [int(d) for d in info.shape], str(info.dtype)), device)
            for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    rt_mod = executable.mod
    context = timing.context
    if context is TimingContext.WARM:
        evaluator = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=repeat, min_repeat_ms=50)
        return float(np.median(evaluator(*args).results)) * 1e3
    if context is TimingContext.FLUSHED:
        evaluator = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=max(repeat, 10),
                                          f_preproc="cache_flush_cpu_non_first_arg")
        return float(np.median(evaluator(*args).results)) * 1e3
    evaluator = evaluator_for(timing)
    assert evaluator is not None
    costs = evaluator(rt_mod, device, ms.runner.EvaluatorConfig(), [args])
    return float(np.median(costs)) * 1e3


def measure_side(name: str, registry: str, args) -> dict:
    """One side's library built and timed: each task over --min-share, in the model and alone."""
    from _same_records import model_and_records

    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.domain.timing_context import DEFAULT_TIMING_CONTEXT, TaskTiming, TimingContext, task_timing
    from foundation.domain.weights_layout import weights_layout_for
    from foundation.job_driver.in_model_times import kernel_names, kernel_times_ms, task_of
    from foundation.meta_schedule.timing_context import buffer_roles, l2_kib_here

    model, target, database = model_and_records(registry, args.model, args.batch)
    form = weights_layout_for("auto", TARGET)
    tasks = extract_tuning_tasks(model, target, prepack=form.prepacks, block_activations=form.blocks_activations)
    library = build_library(model, target, database, prepack=form.prepacks, block_activations=form.blocks_activations)
    names = kernel_names(model, target, form, tasks)
    kernels = kernel_times_ms(library, TARGET, model.make_inputs(0), model.make_weights(0), args.runs)
    task_ms = [0.0] * len(tasks)
    for kernel, ms in kernels.items():
        index = task_of(kernel, names)
        if index is not None:
            task_ms[index] += ms
    total = sum(kernels.values())
    # A registry side was tuned as the farm tunes unless --side-context says otherwise.
    context = TimingContext(args.context_of.get(name, DEFAULT_TIMING_CONTEXT.value))
    l2_kib = l2_kib_here()
    rows = []
    for index, task in enumerate(tasks):
        share = task_ms[index] / total if total else 0.0
        if share < args.min_share:
            continue
        schedule = database.query_schedule(task.mod, target, "main")
        if schedule is None:
            rows.append({"task": task.name, "share": share, "tuned": False})
            continue
        own = task_timing(context, buffer_roles(task.mod), l2_kib)
        in_model = task_ms[index] / task.weight
        warm = alone_ms(schedule.mod, target, TaskTiming(TimingContext.WARM, own.roles, "bench"), args.repeat)
        in_context = alone_ms(schedule.mod, target, own, args.repeat)
        rows.append({"task": task.name, "share": share, "tuned": True, "calls": task.weight,
                     "in_model_ms": in_model, "alone_warm_ms": warm, "alone_context": own.context.value,
                     "alone_context_ms": in_context, "ratio_warm": in_model / warm,
                     "ratio_context": in_model / in_context})
    if not any(r["tuned"] for r in rows):
        raise LookupError(f"{name}: the registry holds no record of any task over {args.min_share:.0%} of "
                          f"{args.model} batch {args.batch}")
    return {"registry": registry, "context": context.value, "kernels_ms": total, "kernels": rows}


def print_side(name: str, side: dict) -> None:
    tuned = [r for r in side["kernels"] if r["tuned"]]
    within = sum(r["ratio_warm"] <= GOAL_RATIO for r in tuned)
    print(f"\n{name} (candidates timed {side['context']}): kernels {side['kernels_ms']:.3f} ms an inference; "
          f"{within} of {len(tuned)} kernels over the share within {GOAL_RATIO}x of their warm alone time")
    print(f"  {'task':44s} {'share':>6s} {'model ms':>9s} {'warm ms':>9s} {'ratio':>6s} "
          f"{'context':>9s} {'ctx ms':>9s} {'ratio':>6s}")
    for r in sorted(side["kernels"], key=lambda r: -r["share"]):
        if not r["tuned"]:
            print(f"  {r['task'][:44]:44s} {r['share']:6.1%}  no record")
            continue
        print(f"  {r['task'][:44]:44s} {r['share']:6.1%} {r['in_model_ms']:9.3f} {r['alone_warm_ms']:9.3f} "
              f"{r['ratio_warm']:6.2f} {r['alone_context']:>9s} {r['alone_context_ms']:9.3f} {r['ratio_context']:6.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--side", action="append", default=[], metavar="NAME=REGISTRY",
                        help="a registry holding the model's records (repeatable)")
    parser.add_argument("--side-context", action="append", default=[], metavar="NAME=CONTEXT",
                        help="the context a --side's candidates were timed in (default: the farm's, warm)")
    parser.add_argument("--tune", type=int, default=None, metavar="TRIALS_PER_TASK",
                        help="tune one side per --contexts here, under --work, first")
    parser.add_argument("--contexts", default="warm,auto", help="the contexts --tune tunes a side in")
    parser.add_argument("--work", type=Path, default=Path("/tmp/in-model-ratio"))
    parser.add_argument("--runs", type=int, default=20, help="instrumented inferences")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats of a kernel alone")
    parser.add_argument("--min-share", type=float, default=0.05, help="kernels listed: over this share of the model")
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)

    from foundation.domain.timing_context import CONTEXTS
    from foundation.errors import FarmError
    from foundation.models.zoo import ZOO

    def pairs(values: list[str], what: str) -> dict[str, str]:
        bad = [v for v in values if "=" not in v or not v.split("=", 1)[0]]
        if bad:
            raise SystemExit(f"error: {what} takes NAME=VALUE, got {bad[0]!r}")
        return dict(v.split("=", 1) for v in values)

    if args.model not in ZOO:
        print(f"error: unknown model '{args.model}' (zoo models: {', '.join(ZOO)})", file=sys.stderr)
        return 2
    if args.runs < 1 or args.repeat < 1 or not 0 <= args.min_share < 1:
        print("error: --runs and --repeat must be at least 1, --min-share from 0 to 1", file=sys.stderr)
        return 2
    try:
        sides = pairs(args.side, "--side")
        args.context_of = pairs(args.side_context, "--side-context")
    except SystemExit as err:
        print(err, file=sys.stderr)
        return 2
    tuned_contexts = [c.strip() for c in args.contexts.split(",") if c.strip()] if args.tune else []
    unknown = [c for c in [*tuned_contexts, *args.context_of.values()] if c not in CONTEXTS]
    if unknown:
        print(f"error: unknown timing context {unknown[0]!r} (use {', '.join(CONTEXTS)})", file=sys.stderr)
        return 2
    if not sides and not tuned_contexts:
        print("error: give a --side NAME=REGISTRY, or --tune TRIALS_PER_TASK", file=sys.stderr)
        return 2
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

    pin_tvm_threads()
    install_lean_tensor_intrinsics(TARGET)
    for context in tuned_contexts:
        sides[context] = tune_side(context, context, args)
        args.context_of.setdefault(context, context)
    report = {"model": args.model, "batch": args.batch, "cpu": cpu_model(), "loadavg_before": load_average(),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "tvm_threads": os.environ.get("TVM_NUM_THREADS"), "min_share": args.min_share, "sides": {}}
    for name, registry in sides.items():
        try:
            report["sides"][name] = measure_side(name, registry, args)
        except LookupError as err:
            print(f"error: {err} (tune it first: farm submit {args.model} {TARGET} {args.batch})", file=sys.stderr)
            return 3
        except FarmError as err:
            print(f"error: {err}", file=sys.stderr)
            return err.exit_code
    report["loadavg_after"] = load_average()
    print(f"{args.model} batch {args.batch} on {report['cpu']}, {report['date_utc']}, load average "
          f"{report['loadavg_before'][0]} -> {report['loadavg_after'][0]}, TVM threads {report['tvm_threads']}")
    for name, side in report["sides"].items():
        print_side(name, side)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
