"""resnet-18, batch 1, on this CPU: the farm-tuned library against untuned TVM, onnxruntime and PyTorch.

Every engine runs the zoo's resnet-18 with the same seeded weights (seed 0) on the same seeded
input. Before anything is timed, the outputs must agree (max |out - untuned TVM| within 1e-3
of the output scale), once with the zoo's weights and once with random BatchNorm shifts and
classifier bias, which the zoo's zero-initialised ones would let a mis-wired export hide.
Timing: a warm-up per engine, then the runs in rounds with the engine order rotated, so that a
burst of background load on a shared box lands on every engine rather than on one.
TVM's thread pool defaults to half the logical CPUs on x86 (it assumes hyper-threading), so
on a 2-vCPU VM the farm's library runs on 1 thread; --tvm-threads 2 sets TVM_NUM_THREADS.

    FARM_HOME=/tmp/qs/home .venv/bin/python bench/compare.py [--runs 30] [--tvm-threads 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from resnet18_onnx import INPUT_NAME, torch_resnet18, write_resnet18_onnx
from timing import cpu_model

MODEL = "resnet-18"
TARGET = "llvm"
BATCH = 1
REL_TOLERANCE = 1e-3
TORCH_THREADS = 2


@dataclass
class Engine:
    name: str
    run: Callable[[np.ndarray], np.ndarray]  # input -> logits
    sample_ms: Callable[[np.ndarray], float]  # one timed inference, in ms
    note: str = ""
    set_weights: Callable[[list[np.ndarray]], None] | None = None


def timed(run: Callable[[np.ndarray], object]) -> Callable[[np.ndarray], float]:
    def sample(x: np.ndarray) -> float:
        begin = time.perf_counter()
        run(x)
        return (time.perf_counter() - begin) * 1e3

    return sample


def tvm_engine(name: str, library, weights: list[np.ndarray], note: str) -> Engine:
    """A LoadedLibrary; one sample is LoadedLibrary.time over one run (arguments already on device)."""
    library.set_weights(weights)
    return Engine(
        name,
        run=lambda x: library([x])[0],
        sample_ms=lambda x: library.time([x], runs=1, warmup=0).median_ms,
        note=note,
        set_weights=library.set_weights,
    )


def ort_engines(onnx_dir: Path, weights, specs) -> tuple[list[Engine], str]:
    import onnxruntime as ort

    def sessions(w) -> list:
        path = onnx_dir / "resnet18.onnx"
        write_resnet18_onnx(path, w, specs, batch=BATCH)
        out = []
        for threads in (None, 2):
            options = ort.SessionOptions()
            if threads is not None:
                options.intra_op_num_threads = threads
            out.append(ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]))
        return out

    current = sessions(weights)
    engines = []
    for index, label in enumerate(("default threads", "intra_op_num_threads=2")):
        def run(x, index=index):
            return current[index].run(None, {INPUT_NAME: x})[0]

        engines.append(Engine(f"onnxruntime ({label})", run, timed(run), "CPUExecutionProvider"))

    def set_weights(w):
        current[:] = sessions(w)

    # One export serves both sessions; reloading through either engine refreshes both.
    engines[0].set_weights = set_weights
    engines[1].set_weights = lambda w: None
    return engines, ort.__version__


def torch_engine(weights, specs) -> tuple[Engine | None, str | None]:
    try:
        import torch
    except ImportError:
        return None, None
    torch.set_num_threads(TORCH_THREADS)
    holder = [torch_resnet18(weights, specs)]

    def run(x):
        with torch.no_grad():
            return holder[0](torch.from_numpy(x)).numpy()

    def set_weights(w):
        holder[0] = torch_resnet18(w, specs)

    note = f"eager, no_grad, set_num_threads({TORCH_THREADS})"
    return Engine("PyTorch", run, timed(run), note, set_weights), torch.__version__


def perturbed(weights: list[np.ndarray], specs) -> list[np.ndarray]:
    """The zoo's weights with random BN scale/shift and classifier bias (those start constant)."""
    rng = np.random.default_rng(1234)
    out = []
    for spec, w in zip(specs, weights):
        if spec.name.endswith(".bias"):
            w = rng.normal(0.0, 0.1, w.shape).astype(w.dtype)
        elif spec.name.split(".")[-2].startswith("bn"):  # bn1.weight, layer1.0.bn2.weight, ...downsample.bn.weight
            w = (w * rng.uniform(0.5, 1.5, w.shape)).astype(w.dtype)
        out.append(w)
    return out


def agreement(engines: list[Engine], x: np.ndarray, reference: str) -> dict[str, dict]:
    outputs = {e.name: np.asarray(e.run(x), np.float64) for e in engines}
    ref = outputs[reference]
    scale = float(np.max(np.abs(ref)))
    result = {}
    for name, out in outputs.items():
        if out.shape != ref.shape:
            result[name] = {"max_abs": float("inf"), "rel": float("inf"), "shape": list(out.shape)}
            continue
        diff = float(np.max(np.abs(out - ref)))
        result[name] = {"max_abs": diff, "rel": diff / max(scale, 1e-30), "scale": scale}
    return result


def check_agreement(title: str, result: dict[str, dict], reference: str) -> None:
    bad = {n: r for n, r in result.items() if not r["rel"] <= REL_TOLERANCE}
    if bad:
        lines = [f"  {n}: max|diff| {r['max_abs']:.3g}, relative {r['rel']:.3g}" for n, r in result.items()]
        sys.exit(f"ABORT: the engines do not compute the same function ({title}; reference {reference},"
                 f" tolerance {REL_TOLERANCE:g} of max|output|):\n" + "\n".join(lines))


def measure(engines: list[Engine], x: np.ndarray, warmup: int, runs: int, rounds: int) -> dict[str, list[float]]:
    for engine in engines:
        for _ in range(warmup):
            engine.run(x)
    samples: dict[str, list[float]] = {e.name: [] for e in engines}
    rounds = max(1, min(rounds, runs))
    for r in range(rounds):
        per_round = runs // rounds + (1 if r < runs % rounds else 0)
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for engine in order:
            engine.run(x)  # the previous engine's threads may still be spinning: not a sample
            samples[engine.name].extend(engine.sample_ms(x) for _ in range(per_round))
    return samples


def summary(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4) if len(values) >= 2 else [values[0]] * 3
    return {
        "mean_ms": statistics.fmean(values),
        "median_ms": statistics.median(values),
        "std_ms": statistics.pstdev(values),
        "min_ms": min(values),
        "iqr_ms": q[2] - q[0],
        "runs": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=None,
                        help="registry URL (default: $FARM_REGISTRY, else the one in $FARM_HOME, as the farm does)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per engine")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs per engine first")
    parser.add_argument("--rounds", type=int, default=3, help="split the runs into this many rotated rounds")
    parser.add_argument("--tvm-threads", type=int, default=None,
                        help="set TVM_NUM_THREADS (default: TVM's own choice, which on x86 is half the"
                             " logical CPUs, assuming hyper-threading)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    args = parser.parse_args()
    if args.tvm_threads is not None:
        os.environ["TVM_NUM_THREADS"] = str(args.tvm_threads)  # read when TVM's thread pool starts

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics(TARGET)
    import farm
    from farm.session import open_context
    from foundation import config
    from foundation.compile import build_library
    from foundation.models.loading import load_model
    from foundation.runtime.library_runner import LoadedLibrary

    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    load_before = os.getloadavg()

    ctx = open_context(args.registry, TARGET)
    deployed = farm.load(MODEL, TARGET, batch=BATCH, registry=args.registry)
    artifact = deployed.artifact
    job = ctx.store.get_job(artifact.job_id) if artifact.job_id else None

    model = load_model(MODEL, BATCH)
    specs = model.weights
    weights = model.make_weights(0)
    (x,) = model.make_inputs(0)
    if not np.array_equal(x, deployed.example_inputs(0)[0]):
        sys.exit("ABORT: the zoo's seeded input differs from the deployed model's example input")

    log(f"building untuned TVM for {ctx.target_json} ...")
    begin = time.perf_counter()
    untuned_bytes = build_library(model, ctx.tvm_target(), None)
    build_s = time.perf_counter() - begin

    tuned = tvm_engine("TVM farm-tuned", deployed.library, weights, f"artifact {artifact.id}")
    untuned = tvm_engine("TVM untuned", LoadedLibrary(untuned_bytes, TARGET), weights,
                         f"built in this run, {build_s:.0f} s")
    with tempfile.TemporaryDirectory(prefix="farm-compare-") as tmp:
        ort_list, ort_version = ort_engines(Path(tmp), weights, specs)
        torch_eng, torch_version = torch_engine(weights, specs)
        engines = [tuned, untuned, *ort_list] + ([torch_eng] if torch_eng else [])

        reference = untuned.name
        check_seed0 = agreement(engines, x, reference)
        check_agreement("seed-0 weights", check_seed0, reference)
        wiring = perturbed(weights, specs)
        for engine in engines:
            if engine.set_weights:
                engine.set_weights(wiring)
        check_wiring = agreement(engines, x, reference)
        check_agreement("random BN scale/shift and fc bias", check_wiring, reference)
        for engine in engines:
            if engine.set_weights:
                engine.set_weights(weights)
        log("outputs agree; timing ...")

        samples = measure(engines, x, args.warmup, args.runs, args.rounds)
    load_after = os.getloadavg()

    stats = {name: summary(values) for name, values in samples.items()}
    base = stats[tuned.name]["median_ms"]
    for s in stats.values():
        s["vs_farm_tuned_median"] = s["median_ms"] / base
    import onnx
    import tvm

    report = {
        "model": MODEL,
        "batch": BATCH,
        "registry": config.registry_url(args.registry),
        "target": ctx.target,
        "machine": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": load_before, "loadavg_after": load_after},
        "threads": {"tvm": tvm.get_global_func("runtime.NumThreads")(),
                    "tvm_num_threads_env": os.environ.get("TVM_NUM_THREADS"),
                    "onnxruntime": "default and intra_op_num_threads=2",
                    "torch": TORCH_THREADS if torch_eng else None},
        "artifact": {"id": artifact.id, "job": artifact.job_id,
                     "trials_done": job.trials_done if job else None,
                     "trials_budget": job.trials_budget if job else None,
                     "recorded_median_ms": artifact.latency_median_ms,
                     "recorded_untuned_mean_ms": artifact.untuned_latency_mean_ms},
        "untuned_build_s": build_s,
        "versions": {"tvm": tvm.__version__, "llvm": ctx.software.get("llvm"), "onnxruntime": ort_version,
                     "onnx": onnx.__version__, "torch": torch_version, "numpy": np.__version__,
                     "python": platform.python_version()},
        "agreement": {"reference": reference, "tolerance_rel": REL_TOLERANCE,
                      "seed0": check_seed0, "random_bn_and_bias": check_wiring},
        "timing": {"warmup": args.warmup, "runs": args.runs, "rounds": args.rounds,
                   "engines": {e.name: {**stats[e.name], "note": e.note} for e in engines}},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print_report(report, torch_installed=torch_eng is not None)


def print_report(r: dict, torch_installed: bool) -> None:
    a, v, m = r["artifact"], r["versions"], r["machine"]
    print(f"\n{r['model']} batch {r['batch']} on {m['cpu']} ({m['logical_cpus']} logical CPUs)")
    print(f"target     {json.dumps(r['target'])}")
    print(f"registry   {r['registry']}")
    print(f"artifact   {a['id']} from {a['job']}: {a['trials_done']} tuning trials (budget {a['trials_budget']});"
          f" recorded at tuning time: median {a['recorded_median_ms']:.1f} ms,"
          f" untuned mean {a['recorded_untuned_mean_ms'] or float('nan'):.1f} ms")
    print(f"versions   TVM {v['tvm']} (LLVM {v['llvm']}), onnxruntime {v['onnxruntime']}, onnx {v['onnx']},"
          f" torch {v['torch'] or 'not installed'}, numpy {v['numpy']}, Python {v['python']}")
    th = r["threads"]
    how = f"TVM_NUM_THREADS={th['tvm_num_threads_env']}" if th["tvm_num_threads_env"] else "TVM's default"
    print(f"threads    TVM {th['tvm']} ({how}); onnxruntime as labelled; torch {th['torch']}")
    print(f"load avg   before {m['loadavg_before'][0]:.2f}, after {m['loadavg_after'][0]:.2f} (1 min)")
    ag = r["agreement"]
    print(f"\nsame function? max|out - {ag['reference']}| / max|{ag['reference']}| "
          f"(must be <= {ag['tolerance_rel']:g})")
    for name in ag["seed0"]:
        s0, s1 = ag["seed0"][name], ag["random_bn_and_bias"][name]
        print(f"  {name:40s} seed-0 weights {s0['rel']:.2e}   random BN/bias {s1['rel']:.2e}")
    t = r["timing"]
    print(f"\nlatency: {t['warmup']} warm-up, then {t['runs']} runs in {t['rounds']} rotated rounds (ms)")
    print(f"  {'engine':40s} {'median':>8s} {'mean':>8s} {'std':>7s} {'IQR':>7s} {'min':>8s}  vs tuned")
    for name, s in t["engines"].items():
        print(f"  {name:40s} {s['median_ms']:8.1f} {s['mean_ms']:8.1f} {s['std_ms']:7.1f} {s['iqr_ms']:7.1f}"
              f" {s['min_ms']:8.1f}  {s['vs_farm_tuned_median']:6.2f}x   {s['note']}")
    if not torch_installed:
        print("  PyTorch: not installed (pip install -e .[torch])")
    print("  (vs tuned = engine median / farm-tuned median; above 1 is slower than the farm)")


if __name__ == "__main__":
    main()
