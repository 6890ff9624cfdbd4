"""What a trial costs: one embedded job (the quick start's by default) split into where its wall
time and CPU time go.

Runs `farm submit MODEL llvm BATCH --trials-per-task N` in this process, into a fresh registry,
with MetaSchedule's profiler on (its C++ scopes: the evolutionary search's sampling, evolution
and cost-model prediction, the cost model's training, ...), every candidate batch's build and
measurement timed as the farm's worker pools see them, and each stage of the job (planning,
tuning, building, validating) timed by its own events. CPU time is this process's and its
worker processes' (the builder and runner pools, counted when they end). Prints a table; the
figures go in docs/benchmarks.md, "What a trial costs".

    .venv/bin/python bench/trial_cost.py [--model resnet-18 --batch 1 --trials-per-task 16] [--json]

Run it on a quiet box: the measurements are the job's, and busy cores change what they rank.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class StageClock:
    """A JobObserver that notes when each stage of the job starts."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def stage(self, state: str, detail: str) -> None:
        self.marks.append((state, time.monotonic()))

    def planned(self, plan) -> None:
        pass

    def started(self, tasks) -> None:
        pass

    def measured(self, task, new_trials: int) -> None:
        pass

    def batch_measured(self, task) -> None:
        pass

    def finished(self, tasks) -> None:
        self.marks.append(("tuned", time.monotonic()))

    def durations(self, end: float) -> dict[str, float]:
        spans: dict[str, float] = {}
        for (state, begin), (_, until) in zip(self.marks, [*self.marks[1:], ("end", end)]):
            spans[state] = spans.get(state, 0.0) + until - begin
        return spans


class BatchClock:
    """A MeasureObserver: the wall time of every batch built and every batch measured."""

    def __init__(self) -> None:
        self.build_s = self.measure_s = 0.0
        self.candidates_built = self.candidates_measured = 0

    def built(self, target_kind: str, results, seconds: float) -> None:
        self.build_s += seconds
        self.candidates_built += len(results)

    def measured(self, target_kind: str, results, seconds: float) -> None:
        self.measure_s += seconds
        self.candidates_measured += len(results)


def cpu_seconds() -> tuple[float, float]:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=16)
    parser.add_argument("--registry", default=None, help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    from timing import cpu_model, load_average
    from tvm.s_tir import meta_schedule as ms

    import farm.embedded as embedded
    from foundation.meta_schedule.measure import WorkerPools

    batches = BatchClock()

    class ObservedPools(WorkerPools):  # the job's pools, with every batch's build and run timed
        def __init__(self, settings=None, observer=None):
            super().__init__(settings, observer or batches)

    embedded.WorkerPools = ObservedPools
    registry = args.registry or f"sqlite:///{tempfile.mkdtemp(prefix='trial-cost-')}/registry.db"
    stages = StageClock()
    load_before = load_average()
    cpu_begin = cpu_seconds()
    begin = time.monotonic()
    with ms.Profiler() as profiler:
        result = embedded.submit(embedded.SubmitRequest(model=args.model, target="llvm", batch=args.batch,
                                                        registry=registry, trials_per_task=args.trials_per_task),
                                 stages)
    end = time.monotonic()
    cpu_end = cpu_seconds()
    if result.job.state != "succeeded":
        sys.exit(f"the job did not succeed: {result.job.state}: {result.job.error}")
    trials = result.report.trials if result.report else 0
    spans = stages.durations(end)
    tuning_s = spans.get("running", 0.0)
    scopes = {name: float(seconds) for name, seconds in profiler.get().items()}
    report = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "load_before": load_before, "load_after": load_average(),
        "model": args.model, "batch": args.batch, "trials": trials, "wall_s": end - begin,
        "trials_per_s_tuning": trials / tuning_s if tuning_s else None,
        "stages_s": spans,
        "tuning": {"build_s": batches.build_s, "measure_s": batches.measure_s, "built": batches.candidates_built,
                   "measured": batches.candidates_measured},
        "cpu_s": {"farm_process": cpu_end[0] - cpu_begin[0], "worker_processes": cpu_end[1] - cpu_begin[1]},
        "metaschedule_scopes_s": dict(sorted(scopes.items(), key=lambda kv: -kv[1])),
        "registry": registry,
        "artifact_latency_ms": result.artifact.latency_median_ms if result.artifact else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.model} b{args.batch}, {trials} trials, {report['wall_s']:.0f} s wall on {report['cpu']} "
          f"(load {load_before} before)")
    for state, seconds in spans.items():
        print(f"  stage {state:<12} {seconds:8.1f} s")
    other = tuning_s - batches.build_s - batches.measure_s
    print(f"  in tuning: build {batches.build_s:.1f} s ({batches.candidates_built} candidates), measure "
          f"{batches.measure_s:.1f} s ({batches.candidates_measured}), the rest (search, cost model, commits) "
          f"{other:.1f} s; {report['trials_per_s_tuning']:.2f} trials/s")
    print(f"  CPU: farm process {report['cpu_s']['farm_process']:.1f} s, worker processes "
          f"{report['cpu_s']['worker_processes']:.1f} s")
    print("  MetaSchedule's profiler (wall s, nested scopes overlap):")
    for name, seconds in list(report["metaschedule_scopes_s"].items())[:15]:
        print(f"    {seconds:8.1f}  {name}")
    print(f"registry: {registry} (time the library against onnxruntime: FARM_REGISTRY=... bench/compare.py)")


if __name__ == "__main__":
    main()
