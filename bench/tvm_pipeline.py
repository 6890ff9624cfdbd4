"""TVM's own `relax.pipeline.static_shape_tuning_pipeline` on a model: tuned, built and exported as a
TVM 0.27 user would, for bench/evaluate.py's peers table.

As TVM's docstring shows the call: `static_shape_tuning_pipeline(total_trials=N, target=T,
work_dir=DIR, cpu_weight_prepack=True, max_trials_per_task=K)(mod)`, then `tvm.compile`; the
weights go through `main_transform_params` once, as the farm's prepacked libraries' do. The
target is the farm's for this box (the same mcpu and cores), and so are the model and weights.
Two departures, each so that TVM's own pipeline runs as it would on a box where it works:
- its builder and runner workers start with the farm's lean tensor intrinsics
  (foundation.hardware.tvm_startup.LeanWorkerInit): TVM's default LocalBuilder has each fresh
  worker import every target's intrinsics at its first build, ~43 s on these 2-core boxes, past
  the builder's 30 s timeout, and every candidate would fail. The worker's code is otherwise
  TVM's: `tune_relax` with its defaults (64 candidates a round, xgb, evolutionary search);
- the farm's float32 erf and exp polynomials are off (FARM_POLYNOMIAL_ERF=0, FARM_POLYNOMIAL_EXP=0):
  TVM's own lowering is what is measured.

    .venv/bin/python bench/tvm_pipeline.py MODEL --batch 1 --trials N [--trials-per-task K]
        --target-json '{"kind": "llvm", ...}' --work DIR

Writes DIR/model.so, DIR/flops.json (TVM's FLOP estimate of each PrimFunc the library calls) and
DIR/summary.json (trials measured, seconds). A DIR whose summary.json says the same model, batch,
trials and target is reused as it is. Exit codes: 0 built (or reused); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Only where missing: a test that imports this must not put bench/profile.py before the standard library's.
for folder in (str(ROOT), str(ROOT / "bench")):
    if folder not in sys.path:
        sys.path.insert(0, folder)

TUNE_RELAX = "tvm.s_tir.meta_schedule.tune_relax"
LIBRARY, FLOPS, SUMMARY = "model.so", "flops.json", "summary.json"


def wanted(model: str, batch: int, trials: int, per_task: int | None, target_json: str) -> dict:
    return {"model": model, "batch": batch, "trials": trials, "trials_per_task": per_task,
            "target": json.loads(target_json)}


def reusable(work: Path, asked: dict) -> dict | None:
    """The summary of a build already in ``work`` for the same question, or None."""
    try:
        summary = json.loads((work / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    same = all(summary.get(key) == value for key, value in asked.items())
    return summary if same and (work / LIBRARY).is_file() and (work / FLOPS).is_file() else None


def lean_tune_relax() -> None:
    """TVM's registered `tune_relax` (what MetaScheduleTuneIRMod calls) with its builder and runner
    workers started lean; every other argument as the pipeline passes it, TVM's defaults for the rest."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import relax_integration

    from foundation.hardware.tvm_startup import LeanWorkerInit

    def tune(mod, params, target, work_dir, max_trials_global, max_trials_per_task=None, op_names=None):
        relax_integration.tune_relax(
            mod, params, target, work_dir, int(max_trials_global),
            max_trials_per_task=int(max_trials_per_task) if max_trials_per_task is not None else None,
            op_names=op_names,
            builder=ms.builder.LocalBuilder(initializer=LeanWorkerInit("llvm")),
            runner=ms.runner.LocalRunner(initializer=LeanWorkerInit("llvm")),
        )
        return mod

    tvm.register_global_func(TUNE_RELAX, tune, override=True)


def tuned_records(work_dir: Path) -> int:
    path = work_dir / "database_tuning_record.json"
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.is_file() else 0


def build(model_name: str, batch: int, trials: int, per_task: int | None, target_json: str, work: Path) -> dict:
    """Tune, build and export; the summary written to ``work``."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")  # this process too: TVM's pipeline imports what it needs
    import tvm
    from tvm import relax
    from vm_calls import function_flops

    from foundation.hardware.targets import to_tvm_target
    from foundation.models.loading import load_model

    lean_tune_relax()
    target = to_tvm_target(json.loads(target_json))
    model = load_model(model_name, batch)
    mod = model.mod.clone()  # which of main's parameters are inputs: the rest are weights to prepack
    mod["main"] = mod["main"].with_attr("num_input", len(model.inputs))
    tuning = work / "tuning_logs"
    shutil.rmtree(tuning, ignore_errors=True)  # a build that died half-way: its records would add to these
    begin = time.perf_counter()
    mod = relax.pipeline.static_shape_tuning_pipeline(
        total_trials=trials, target=target, work_dir=str(tuning), cpu_weight_prepack=True,
        max_trials_per_task=per_task)(mod)
    tuned_s = time.perf_counter() - begin
    executable = tvm.compile(mod, target=target)
    executable.export_library(str(work / LIBRARY))
    (work / FLOPS).write_text(json.dumps(function_flops(mod), indent=1) + "\n")
    summary = {**wanted(model_name, batch, trials, per_task, target_json), "records": tuned_records(tuning),
               "tune_s": tuned_s, "build_s": time.perf_counter() - begin - tuned_s,
               "tvm": tvm.__version__}
    (work / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials", type=int, required=True, help="total_trials")
    parser.add_argument("--trials-per-task", type=int, default=None, help="max_trials_per_task")
    parser.add_argument("--target-json", required=True, help="the target as the farm writes it (farm fingerprint)")
    parser.add_argument("--work", type=Path, required=True, help="folder for the logs, library and summary")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.trials < 0 or (args.trials_per_task is not None and args.trials_per_task < 1):
        print("error: --batch and --trials-per-task must be at least 1, --trials at least 0 (pass counts)",
              file=sys.stderr)
        return 2
    try:
        json.loads(args.target_json)
    except ValueError:
        print(f"error: --target-json is not JSON: {args.target_json!r} (pass the farm's target document)",
              file=sys.stderr)
        return 2
    # Before TVM is imported here or in any worker: TVM's own lowering of erf and exp.
    os.environ["FARM_POLYNOMIAL_ERF"] = os.environ["FARM_POLYNOMIAL_EXP"] = "0"
    asked = wanted(args.model, args.batch, args.trials, args.trials_per_task, args.target_json)
    summary = reusable(args.work, asked)
    if summary is None:
        args.work.mkdir(parents=True, exist_ok=True)
        summary = build(args.model, args.batch, args.trials, args.trials_per_task, args.target_json, args.work)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
