"""Does the box's own tuning work distort the latency the farm stores? Timing a library three ways.

The library (a model built with TVM's default schedules) is timed as the farm times an artifact
(foundation.runtime.library_runner: warm-up, then timed runs) in rounds that alternate:

- quiet:  no worker pool in the process;
- idle:   the tuning pools of an embedded job alive but idle (warm builder workers, the runner's
          worker), as they are when `farm submit` validates right after tuning;
- busy:   the warm builder compiling candidates meanwhile, as another agent tuning on the same
          box does while an agent validates.

Alternating rounds keep the box's own drift (other users' load) out of the comparison.

    .venv/bin/python bench/quiet_timing.py [--model resnet-tiny] [--rounds 5] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import threading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-tiny")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    options = parser.parse_args()

    from foundation.hardware.tvm_startup import LeanWorkerInit, install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from foundation.compile import build_library, extract_tuning_tasks
    from foundation.meta_schedule.measure import MeasureSettings, WorkerPools
    from foundation.meta_schedule.warm_builder import warm_builder
    from foundation.models.loading import load_model
    from foundation.runtime.library_runner import LoadedLibrary

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    loaded = load_model(options.model, 1)
    library = LoadedLibrary(build_library(loaded, target, None), "llvm")
    library.set_weights(loaded.make_weights(0))
    inputs = loaded.make_inputs(0)
    candidates = [ms.builder.BuilderInput(task.mod, target) for task in extract_tuning_tasks(loaded, target)]

    def timed() -> float:
        return library.time(inputs, runs=options.runs, warmup=3).median_ms

    samples: dict[str, list[float]] = {"quiet": [], "idle": [], "busy": []}
    for round_index in range(options.rounds):
        samples["quiet"].append(timed())

        pools = WorkerPools(MeasureSettings())
        builder, _runner = pools.get("llvm")
        builder.build(candidates[:2])  # every worker started and used once, then idle
        samples["idle"].append(timed())
        pools.close()

        busy = warm_builder(None, 120.0, LeanWorkerInit("llvm"))
        stop = threading.Event()

        def compile_until(builder, stop: threading.Event) -> None:
            while not stop.is_set():
                builder.build(candidates)

        worker = threading.Thread(target=compile_until, args=(busy, stop), daemon=True)
        worker.start()
        samples["busy"].append(timed())
        stop.set()
        worker.join()
        busy.shutdown()
        print(f"round {round_index + 1}: " + "  ".join(f"{k} {v[-1]:.3f} ms" for k, v in samples.items()), flush=True)

    quiet = statistics.median(samples["quiet"])
    print(f"\n{options.model}, median of {options.rounds} rounds' medians ({options.runs} runs each):")
    for kind, values in samples.items():
        print(f"  {kind:<6} {statistics.median(values):8.3f} ms  ({statistics.median(values) / quiet:.2f}x quiet)"
              f"  rounds: {', '.join(f'{v:.3f}' for v in values)}")


if __name__ == "__main__":
    main()
