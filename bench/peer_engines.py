"""bench/evaluate.py's peers beyond onnxruntime and PyTorch eager: `torch.compile`, and TVM's own
`static_shape_tuning_pipeline` tuned at the farm's trials (bench/tvm_pipeline.py, in a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from timing import Engine

BENCH = Path(__file__).resolve().parent
TORCH_COMPILE, TVM_PIPELINE = "torch.compile", "TVM pipeline"


def standard_profile_module() -> None:
    """Import the standard library's cProfile (and its `profile`), which torch.compile imports: a
    script in bench/ has bench/ first on sys.path, where bench/profile.py would stand in for it."""
    if "cProfile" in sys.modules:
        return
    kept = list(sys.path)
    sys.path[:] = [p for p in kept if Path(p or ".").resolve() != BENCH]
    try:
        import cProfile  # noqa: F401
    finally:
        sys.path[:] = kept


def torch_compile_engine(model, weights, target_kind: str) -> tuple[Engine | None, str]:
    try:
        import torch
    except ImportError:
        return None, "PyTorch not installed (pip install -e .[torch]): torch.compile skipped"
    standard_profile_module()
    from relax_graph import TorchCompiled

    device = "cuda" if target_kind == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device: torch.compile skipped"
    torch.set_num_threads(os.cpu_count() or 1)
    compiled = TorchCompiled(model.mod, weights, device)
    return Engine(TORCH_COMPILE, compiled, note=f"torch {torch.__version__} on {device}, torch.compile (Inductor), "
                                                f"no_grad, set_num_threads({torch.get_num_threads()})",
                  set_weights=compiled.set_weights, sample_ms=compiled.time_ms), ""


def pipeline_work_dir(root: Path, model: str, batch: int, trials: int, per_task: int | None) -> Path:
    """One folder per question, so a later run with the same model, batch and budget reuses the build."""
    return root / f"{model}-b{batch}-{trials}-{per_task if per_task is not None else 'all'}"


def build_tvm_pipeline(model: str, batch: int, trials: int, per_task: int | None, target_json: str,
                       work: Path, log) -> dict:
    """bench/tvm_pipeline.py in a process of its own (its own erf and exp, its own worker pools);
    its summary, or RuntimeError with its last lines."""
    command = [sys.executable, str(BENCH / "tvm_pipeline.py"), model, "--batch", str(batch), "--trials", str(trials),
               "--target-json", target_json, "--work", str(work)]
    if per_task is not None:
        command += ["--trials-per-task", str(per_task)]
    log(f"$ {' '.join(command)}")
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench/tvm_pipeline.py exited {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tvm_pipeline_engine(model_name: str, batch: int, trials: int, per_task: int | None, target_json: str,
                        root: Path, target_kind: str, weights, log) -> tuple[Engine | None, str, dict | None]:
    """The engine, why it is missing (when it is), and the build: its summary, work folder, loaded
    library and the FLOPs of each function the library calls (for the per-kernel table)."""
    if target_kind != "llvm":
        return None, f"TVM's pipeline is built here for CPUs only, not {target_kind}: skipped", None
    from foundation.runtime.library_runner import LoadedLibrary

    work = pipeline_work_dir(root, model_name, batch, trials, per_task)
    summary = build_tvm_pipeline(model_name, batch, trials, per_task, target_json, work, log)
    library = LoadedLibrary((work / "model.so").read_bytes(), target_kind)
    library.set_weights(weights)
    note = (f"relax.pipeline.static_shape_tuning_pipeline(total_trials={trials}, max_trials_per_task={per_task}, "
            f"cpu_weight_prepack=True): {summary['records']} records, tuned in {summary['tune_s']:.0f} s")
    engine = Engine(TVM_PIPELINE, run=lambda x: library(x), note=note, set_weights=library.set_weights,
                    sample_ms=lambda x: library.time(x, runs=1, warmup=0).median_ms)
    flops = json.loads((work / "flops.json").read_text())
    return engine, "", {"summary": summary, "work": str(work), "flops": flops, "library": library}
