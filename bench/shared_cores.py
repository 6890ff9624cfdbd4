"""Latency when the cores are shared: farm-tuned libraries against onnxruntime, quiet and with
every core busy, in one run.

For each model (tuned and stored in the registry first, e.g. by `farm submit`), the stored
library is timed on the thread counts the farm can choose (`auto`, 1, every core) beside
onnxruntime on the model's ONNX form (a file's own, or the zoo model exported with the same
weights), outputs checked against each other first. Each condition is timed interleaved
(bench/timing.py); "busy" starts one CPU-bound process per core (a pure-Python loop, niced to 0
like the benchmark) for its rounds and stops them after.

    .venv/bin/python bench/shared_cores.py mlp-tiny:1 resnet-18:1 [--runs 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TARGET = "llvm"


def spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def busy_processes(count: int):
    """``count`` CPU-bound processes, started; returns what stops them."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(count)]
    for proc in procs:
        proc.start()

    def stop_all() -> None:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)

    return stop_all


def engines_for(model: str, batch: int, registry: str | None, cores: int):
    """The farm's stored library on auto's thread count, on 1 and on every core, and
    onnxruntime, for one model, outputs checked; and its inputs."""
    from timing import Engine, check_outputs

    import farm
    from foundation.job_driver.tuning_rounds import exported_onnx
    from foundation.models.loading import load_model
    from foundation.runtime.onnx_reference import OnnxRuntimeModel

    loaded = load_model(model, batch)
    weights, inputs = loaded.make_weights(0), loaded.make_inputs(0)
    # One load per engine, each with its own count: auto is farm.load's default (its count, and on
    # every core the step back to one thread while the cores are taken, LoadedLibrary.busy_backoff).
    # Each resizes the process's pool before its runs, only when the count changes: each block of
    # interleaved runs starts with an untimed call, which pays for it.
    deployed = {threads: farm.load(model, TARGET, batch=batch, registry=registry, threads=threads)
                for threads in ("auto", 1, cores)}
    for one in deployed.values():
        one.library.set_weights(weights)
    onnx_bytes = Path(model).read_bytes() if model.endswith(".onnx") else exported_onnx(loaded, 0)
    ort = OnnxRuntimeModel(onnx_bytes, [s.name for s in loaded.inputs], f"{model} as ONNX")
    stored_ms = deployed["auto"].artifact.latency_median_ms
    auto = deployed["auto"].library.threads
    auto_name = f"farm auto ({auto}{', 1 when busy' if deployed['auto'].library.busy_backoff else ''})"
    engines = [Engine(auto_name, deployed["auto"].library), Engine("farm 1 thread", deployed[1].library),
               Engine(f"farm {cores} threads", deployed[cores].library), Engine("onnxruntime", ort)]
    reference = ort(inputs)
    for engine in engines[:3]:
        agreed = check_outputs(engine.run(inputs), reference, engine.name)
        if not agreed.passed:
            sys.exit(f"ABORT: {engine.name} disagrees with onnxruntime on {model}: {agreed}")
    return engines, inputs, auto, stored_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="MODEL:BATCH (zoo name or .onnx file), tuned in the registry")
    parser.add_argument("--registry", default=None)
    parser.add_argument("--runs", type=int, default=300, help="timed runs per engine and condition")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy", type=int, default=None, help="CPU-bound processes when busy (default: one per core)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from foundation.hardware.fingerprint import available_cores
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics(TARGET)
    from timing import cpu_model, interleaved, load_average

    cores = available_cores()
    busy = args.busy if args.busy is not None else cores
    report = {"cpu": cpu_model(), "cores": cores, "busy_processes": busy, "runs": args.runs, "models": []}
    for spec in args.models:
        model, _, batch = spec.rpartition(":")
        engines, inputs, auto, stored_ms = engines_for(model, int(batch), args.registry, cores)
        row = {"model": model, "batch": int(batch), "stored_ms": stored_ms, "auto_threads": auto,
               "load_before": load_average()}
        for condition in ("quiet", "busy"):
            stop = busy_processes(busy) if condition == "busy" else None
            try:
                samples = interleaved(engines, inputs, args.runs, 5, args.rounds)
            finally:
                if stop is not None:
                    stop()
            row[condition] = {name: s.summary()["median_ms"] for name, s in samples.items()}
        report["models"].append(row)
        if not args.json:
            print(f"{model} b{batch} (stored {stored_ms} ms; auto: {auto} thread(s)), medians in ms:")
            for condition in ("quiet", "busy"):
                ort = row[condition]["onnxruntime"]
                cells = "  ".join(f"{n} {v:.4f} ({v / ort:.2f}x)" for n, v in row[condition].items())
                print(f"  {condition:5s} {cells}")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"CPU {report['cpu']}, {cores} cores, busy = {busy} spinning processes, {args.runs} runs a cell")


if __name__ == "__main__":
    main()
