"""GFLOP/s of a tuned model's dense and conv2d kernels against this box's numpy sgemm (2048^3).

For every tuning task of MODEL at BATCH whose name holds a convolution or a matmul, the
registry's best record (this fingerprint, target and TVM version) is replayed, built alone
and timed with TVM's time_evaluator on seeded random arguments (zeros would let libm's erff and
expf in fused epilogues return at once: bert's GELU matmul timed 1.4 ms on zeros, 3.2 on
activations, before the farm's erf); GFLOP/s is the task's FLOP
count (TVM's estimate_tir_flops, the fused elementwise tail included) over its median time.
numpy's float32 matmul of two 2048x2048 matrices, on the same threads, is the yardstick: it is
timed again right before each kernel, and each ratio is against that neighbouring figure, so a
burst of load on a shared box moves both sides of a ratio rather than one.

    FARM_HOME=... .venv/bin/python bench/kernels.py resnet-18|MODEL.onnx [--batch 1] [--registry URL]
        [--cache-flush] [--json]

Exit codes: 0 done; 2 bad arguments; 3 no registry, or no record in it for any such task; 4 a
registry that cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402

TARGET = "llvm"
KERNEL_WORDS = ("conv2d", "matmul", "dense")
SGEMM_N = 2048


_SGEMM_OPERANDS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def numpy_sgemm_gflops(n: int = SGEMM_N, repeats: int = 10) -> dict:
    if n not in _SGEMM_OPERANDS:
        rng = np.random.default_rng(0)
        _SGEMM_OPERANDS[n] = (rng.standard_normal((n, n), dtype=np.float32),
                              rng.standard_normal((n, n), dtype=np.float32))
    a, b = _SGEMM_OPERANDS[n]
    a @ b  # warm-up: BLAS threads start
    seconds = []
    for _ in range(repeats):
        begin = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - begin)
    median = statistics.median(seconds)
    return {"n": n, "median_s": median, "gflops": 2 * n**3 / median / 1e9, "best_gflops": 2 * n**3 / min(seconds) / 1e9}


def kernel_of(mod):
    """The scheduled PrimFunc ``mod`` as the library runs it per inference.

    A prepacked kernel's schedule rearranges its weights in a block of its own, which the
    library runs once at load (SplitLayoutRewritePreproc): it is taken out, as MetaSchedule's
    builder takes it out of what tuning measures, and the kernel reads its weights packed."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)


def _random(rng, shape: list[int], dtype: str) -> np.ndarray:
    """Standard-normal floats, or small integers (indices stay in range for gathers of size >= 2)."""
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def time_kernel(mod, target, number: int, repeat: int, cache_flush: bool = False) -> float:
    """Median seconds of one call of the scheduled PrimFunc ``mod['main']`` (its kernel_of).

    With ``cache_flush`` every call is one repeat, after TVM flushes the CPU caches of all its
    arguments but the first (`cache_flush_cpu_non_first_arg`, as MetaSchedule's runner does
    with `enable_cpu_cache_flush`): the weights come from memory, as in a model whose other
    kernels have run in between, instead of from a cache the previous call left warm."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod = kernel_of(mod)
    executable = tvm.compile(mod, target=target)
    device = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(_random(rng, [int(d) for d in info.shape], str(info.dtype)), device)
            for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    if cache_flush:
        evaluator = executable.mod.time_evaluator("main", device, number=1, repeat=max(repeat, 20),
                                                  f_preproc="cache_flush_cpu_non_first_arg")
    else:
        evaluator = executable.mod.time_evaluator("main", device, number=number, repeat=repeat, min_repeat_ms=50)
    return float(np.median(evaluator(*args).results))


def main(argv: list[str] | None = None) -> int:
    from foundation.domain.weights_layout import WeightsLayout, weights_layout_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats per kernel (each >= 50 ms)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--weights-layout", default="auto", choices=["auto", *(form.value for form in WeightsLayout)],
                        help="which form's kernels (auto: the form `farm submit` tunes by default)")
    parser.add_argument("--cache-flush", action="store_true",
                        help="time each call after flushing the caches of its weights (at least 20 calls)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from farm.session import open_context
    from foundation.errors import FarmError
    from foundation.models.zoo import ZOO

    onnx_file = args.model.endswith(".onnx") and Path(args.model).is_file()
    if args.model not in ZOO and not onnx_file:  # before TVM's import, which costs seconds
        print(f"error: unknown model '{args.model}' (zoo models: {', '.join(ZOO)}; or an .onnx file)",
              file=sys.stderr)
        return 2
    try:
        ctx = open_context(args.registry, TARGET)
    except FarmError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

    pin_tvm_threads()
    install_lean_tensor_intrinsics(TARGET)
    from foundation.compile import extract_tuning_tasks
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.models.loading import load_model

    layout = weights_layout_for(args.weights_layout, TARGET)
    model = load_model(args.model, args.batch)
    target = ctx.tvm_target()
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    load_before = load_average()
    rows, sgemm_samples = [], []
    for task in extract_tuning_tasks(model, target, prepack=layout.prepacks,
                                     block_activations=layout.blocks_activations):
        if not any(word in task.name for word in KERNEL_WORDS):
            continue
        schedule = database.query_schedule(task.mod, target, "main")
        if schedule is None:
            rows.append({"task": task.name, "weight": task.weight, "gflop": task.flop / 1e9, "tuned": False})
            continue
        neighbour = numpy_sgemm_gflops(repeats=3)["gflops"]
        sgemm_samples.append(neighbour)
        seconds = time_kernel(schedule.mod, target, number=1, repeat=args.repeat, cache_flush=args.cache_flush)
        gflops = task.flop / seconds / 1e9
        rows.append({"task": task.name, "weight": task.weight, "gflop": task.flop / 1e9, "tuned": True,
                     "ms": seconds * 1e3, "gflops": gflops, "numpy_sgemm_gflops": neighbour,
                     "vs_numpy_sgemm": gflops / neighbour})
        print(f"  {task.name[:52]:52s} x{task.weight:<2d} {task.flop / 1e9:7.3f} GFLOP {seconds * 1e3:9.3f} ms"
              f" {gflops:7.1f} GFLOP/s  {gflops / neighbour:5.2f}x sgemm ({neighbour:.1f})", file=sys.stderr,
              flush=True)
    tuned = [r for r in rows if r["tuned"]]
    if not tuned:
        print(f"error: the registry holds no record for any conv2d/matmul task of {args.model} batch {args.batch} "
              f"({layout.value} weights) "
              f"on {ctx.fingerprint.id} (run `farm submit {args.model} {TARGET} {args.batch}` first)", file=sys.stderr)
        return 3
    sgemm = {"n": SGEMM_N, "gflops": statistics.median(sgemm_samples), "min_gflops": min(sgemm_samples),
             "max_gflops": max(sgemm_samples), "samples": len(sgemm_samples)}
    # Over the model, as it spends its time: total FLOPs over total time, each task by its calls.
    flop = sum(r["gflop"] * r["weight"] for r in tuned)
    seconds = sum(r["ms"] / 1e3 * r["weight"] for r in tuned)
    report = {
        "model": args.model, "batch": args.batch, "fingerprint": ctx.fingerprint.id,
        "weights_layout": layout.value, "cache_flush": args.cache_flush,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "loadavg_before": load_before, "loadavg_after": load_average(),
        "tvm_threads": __import__("os").environ.get("TVM_NUM_THREADS"),
        "numpy_sgemm": sgemm, "kernels": rows,
        "weighted": {"gflops": flop / seconds, "vs_numpy_sgemm": flop / seconds / sgemm["gflops"]},
        "median_kernel_vs_numpy_sgemm": statistics.median(r["vs_numpy_sgemm"] for r in tuned),
        "best_kernel_vs_numpy_sgemm": max(r["vs_numpy_sgemm"] for r in tuned),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['cpu']}, {report['date_utc']}, load average {load_before[0]} -> {report['loadavg_after'][0]}, "
          f"TVM threads {report['tvm_threads']}")
    print(f"numpy sgemm {SGEMM_N}^3: {sgemm['gflops']:.1f} GFLOP/s (median of the {sgemm['samples']} figures taken"
          f" beside the kernels; {sgemm['min_gflops']:.1f}-{sgemm['max_gflops']:.1f})")
    print(f"{args.model} batch {args.batch}: {len(tuned)} tuned conv2d/matmul kernels"
          f" ({len(rows) - len(tuned)} without a record)")
    print(f"  all of them, weighted by calls: {report['weighted']['gflops']:.1f} GFLOP/s"
          f" = {report['weighted']['vs_numpy_sgemm']:.2f}x numpy sgemm")
    print(f"  kernels' own ratios: median {report['median_kernel_vs_numpy_sgemm']:.2f}x, best "
          f"{report['best_kernel_vs_numpy_sgemm']:.2f}x numpy sgemm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
