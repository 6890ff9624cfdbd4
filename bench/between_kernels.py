"""What lies between a tuned model's kernels, as shares of its time: layout transforms, padding copies,
the tasks its library runs untuned, and the VM's own calls.

The farm-tuned library (farm.load, as `farm run` loads it) runs --runs inferences with every call
of its VM timed (bench/vm_calls.py); each called function falls in one category, the first that fits:

- VM builtins: the VM's own calls (vm.*, relax.*: allocation, shape checks, reshape views);
- layout transforms: a function made only of layout_transform, transpose, reshape, expand_dims,
  squeeze, flatten (by its name: TVM names a fused function after its ops), e.g. the blocked
  activations' way back to NCHW, or bert's attention heads split and merged;
- padding copies: the same with at least one pad;
- tasks built untuned: a tuning task the library compiled as extracted (its untuned form timed
  fastest, or it had no record: foundation.job_driver.built_untuned, from the artifact's job);
- tuned kernels: the rest.

Each category's time per inference, its share of the profiled sum and of the unprofiled whole
model (the hook costs microseconds a call: the two shares bracket the truth), and its functions.

    FARM_HOME=... .venv/bin/python bench/between_kernels.py resnet-18 [--batch 1] [--runs 20] [--out F.json] [--json]

Exit codes: 0 done; 2 bad arguments; 3 no tuned library for the model in the registry; 4 a registry
that cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Only where missing: a test that imports this must not put bench/profile.py before the standard library's.
for folder in (str(ROOT), str(ROOT / "bench")):
    if folder not in sys.path:
        sys.path.insert(0, folder)

from timing import cpu_model, load_average  # noqa: E402
from tuned_library import load_tuned_library  # noqa: E402
from vm_calls import PREPACKED_SUFFIX, is_vm_builtin, time_calls  # noqa: E402

TARGET = "llvm"
TUNED, UNTUNED, LAYOUT, PADDING, BUILTINS = ("tuned kernels", "tasks built untuned", "layout transforms",
                                             "padding copies", "VM builtins")
CATEGORIES = (TUNED, UNTUNED, LAYOUT, PADDING, BUILTINS)
BETWEEN = (UNTUNED, LAYOUT, PADDING, BUILTINS)
_MOVE = r"(?:layout_transform|transpose|permute_dims|reshape|expand_dims|squeeze|flatten)\d*"
_PAD = r"pad\d*"
_ONLY_MOVES = re.compile(rf"{_MOVE}(?:_{_MOVE})*")
_MOVES_AND_PADS = re.compile(rf"(?:{_MOVE}|{_PAD})(?:_(?:{_MOVE}|{_PAD}))*")


def task_name(name: str) -> str:
    """The tuning task a library function is: its name without the prepacked form's suffix."""
    return name[: -len(PREPACKED_SUFFIX)] if name.endswith(PREPACKED_SUFFIX) else name


def category_of(name: str, built_untuned: set[str]) -> str:
    """The category (module docstring) of the function a library calls ``name``."""
    if is_vm_builtin(name):
        return BUILTINS
    ops = task_name(name).removeprefix("fused_")
    if _ONLY_MOVES.fullmatch(ops):
        return LAYOUT
    if _MOVES_AND_PADS.fullmatch(ops):
        return PADDING
    if task_name(name) in built_untuned:
        return UNTUNED
    return TUNED


def between_report(times, whole_ms: float, built_untuned: set[str]) -> dict:
    """Categories and their functions from a CallTimes (bench/vm_calls.py) and the unprofiled median."""
    profiled = times.total_ms()
    categories = {c: {"ms": 0.0, "calls": 0.0, "functions": []} for c in CATEGORIES}
    for name in times.names():
        entry = categories[category_of(name, built_untuned)]
        ms, calls = times.ms(name), times.calls_per_inference(name)
        entry["ms"] += ms
        entry["calls"] += calls
        entry["functions"].append({"name": name, "ms": ms, "calls": calls})
    for entry in categories.values():
        entry["share_of_profiled"] = entry["ms"] / profiled if profiled else 0.0
        entry["share_of_whole"] = entry["ms"] / whole_ms if whole_ms else 0.0
    between = sum(categories[c]["ms"] for c in BETWEEN)
    return {"whole_model_median_ms": whole_ms, "profiled_sum_ms": profiled, "categories": categories,
            "between_ms": between, "between_share_of_profiled": between / profiled if profiled else 0.0,
            "between_share_of_whole": between / whole_ms if whole_ms else 0.0}


def built_untuned_of(ctx, deployed, model) -> tuple[set[str], str]:
    """The tasks the artifact's library runs untuned, and where that was read: its job's note, or
    (a library whose job kept none) the registry's records now, as the build would read them."""
    from foundation.domain.job_spec import job_notes

    try:
        note = job_notes(ctx.store.get_job(deployed.artifact.job_id)).built_untuned
    except Exception:  # a job from an imported pack, or gone: read the records instead
        note = None
    tasks = note.get("tasks") if isinstance(note, dict) else getattr(note, "tasks", None)  # JSON, or BuiltUntuned
    if tasks is not None:
        return set(tasks), "the artifact's job"
    from foundation.compile import extract_tuning_tasks
    from foundation.domain.weights_layout import WeightsLayout
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.meta_schedule.untuned_form import tasks_built_untuned

    form = WeightsLayout(deployed.artifact.weights_layout)
    tasks = extract_tuning_tasks(model, ctx.tvm_target(), prepack=form.prepacks,
                                 block_activations=form.blocks_activations)
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    return set(tasks_built_untuned(tasks, database)), "the registry's records"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--runs", type=int, default=20, help="profiled inferences (and as many unprofiled)")
    parser.add_argument("--top", type=int, default=8, help="functions listed per category")
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.top < 1 or args.batch < 1:
        print("error: --runs, --top and --batch must be at least 1 (pass positive counts)", file=sys.stderr)
        return 2

    from foundation.errors import FarmError
    from foundation.models.zoo import ZOO

    onnx_file = args.model.endswith(".onnx") and Path(args.model).is_file()
    if args.model not in ZOO and not onnx_file:  # before TVM's import, which costs seconds
        print(f"error: unknown model '{args.model}' (zoo models: {', '.join(ZOO)}; or an .onnx file)",
              file=sys.stderr)
        return 2
    try:  # a missing registry is refused before TVM's import
        tuned = load_tuned_library(args.model, args.batch, args.registry, TARGET)
    except FarmError as err:  # an unknown model (2), no tuned library (3), an unreadable registry (4)
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    ctx, model, inputs, deployed = tuned.ctx, tuned.model, tuned.inputs, tuned.deployed
    untuned, untuned_from = built_untuned_of(ctx, deployed, model)
    load_before = load_average()
    whole = deployed.library.time(inputs, runs=args.runs, warmup=3).median_ms
    times = time_calls(deployed.library, inputs, args.runs)
    report = {
        "model": args.model, "batch": args.batch, "artifact": deployed.artifact.id,
        "weights_layout": deployed.artifact.weights_layout,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "loadavg_before": load_before, "loadavg_after": load_average(),
        "runs": args.runs, "tvm_threads": os.environ.get("TVM_NUM_THREADS"),
        "built_untuned": sorted(untuned), "built_untuned_from": untuned_from,
        **between_report(times, whole, untuned),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, args.top)
    return 0


def print_report(r: dict, top: int) -> None:
    print(f"{r['model']} batch {r['batch']} ({r['artifact']}, {r['weights_layout']}) on {r['cpu']}, "
          f"{r['date_utc']}, load average {r['loadavg_before'][0]} -> {r['loadavg_after'][0]}, "
          f"TVM threads {r['tvm_threads']}")
    print(f"whole model, unprofiled median {r['whole_model_median_ms']:.3f} ms; profiled calls sum to "
          f"{r['profiled_sum_ms']:.3f} ms; between the tuned kernels: {r['between_ms']:.3f} ms = "
          f"{r['between_share_of_profiled']:.1%} of the profiled sum, {r['between_share_of_whole']:.1%} of the whole")
    print(f"\n{'category':22s} {'ms':>9s} {'calls':>6s} {'profiled':>9s} {'whole':>7s}")
    for name, c in r["categories"].items():
        print(f"{name:22s} {c['ms']:9.3f} {c['calls']:6.0f} {c['share_of_profiled']:9.1%} {c['share_of_whole']:7.1%}")
    for name in BETWEEN:
        functions = r["categories"][name]["functions"]
        if functions:
            print(f"\n{name}:")
            for f in functions[:top]:
                print(f"  {f['name'][:60]:60s} {f['ms']:9.3f} ms {f['calls']:5.0f} calls")
            if len(functions) > top:
                print(f"  ... and {len(functions) - top} more")


if __name__ == "__main__":
    sys.exit(main())
