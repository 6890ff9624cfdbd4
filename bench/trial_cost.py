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

Search sizes set against each other (each a job into a fresh registry, the same seed; then the
libraries timed interleaved, and a table of trials/s, search/build/run seconds and latency):

    .venv/bin/python bench/trial_cost.py --model resnet-tiny --search plan --search 64:2 --search 32:1

Run it on a quiet box: the measurements are the job's, and busy cores change what they rank.
"""

from __future__ import annotations

import argparse
import contextlib
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


class ExtractionClock:
    """MetaSchedule's feature extraction, timed wherever it is called: the cost model's prediction
    (the cross model's FeatureCache, for the candidates it has not cached) and its update (XGBModel
    extracts the measured candidates' features again). The part of the cost model's time that any
    model reading PerStoreFeature pays, against the model's own."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.candidates = 0

    @contextlib.contextmanager
    def observing(self):
        from tvm.s_tir.meta_schedule.feature_extractor import FeatureExtractor

        extract = FeatureExtractor.extract_from

        def timed(extractor, context, candidates):
            begin = time.perf_counter()
            try:
                return extract(extractor, context, candidates)
            finally:
                self.seconds += time.perf_counter() - begin
                self.candidates += len(candidates)

        FeatureExtractor.extract_from = timed
        try:
            yield self
        finally:
            FeatureExtractor.extract_from = extract


def cpu_seconds() -> tuple[float, float]:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def search_setting(text: str):
    """``POPULATION:GENERATIONS``, or ``plan`` for the search sizes the farm picks by each task's plan."""
    from foundation.meta_schedule.planned_search import SearchSize

    if text == "plan":
        return None
    try:
        population, generations = (int(part) for part in text.split(":"))
        return SearchSize(population, generations)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected POPULATION:GENERATIONS (e.g. 64:2) or plan") from None


def search_seconds(scopes: dict[str, float]) -> float:
    """The evolutionary search's wall time: its innermost profiler scopes (nested ones overlap)."""
    names = [n for n in scopes if n.startswith("EvoSearch/")]
    return sum(scopes[n] for n in names if not any(other.startswith(n + "/") for other in names))


def run_job(args, size, registry: str) -> dict:
    """One embedded job into ``registry`` with every task's search ``size`` (None: the plan's), profiled."""
    from timing import cpu_model, load_average
    from tvm.s_tir import meta_schedule as ms

    import farm.embedded_site as embedded_site
    from farm.embedded import submit
    from farm.submit_values import SubmitRequest
    from foundation.meta_schedule.measure import WorkerPools
    from foundation.meta_schedule.planned_search import sized_searches

    batches = BatchClock()

    class ObservedPools(WorkerPools):  # the job's pools, with every batch's build and run timed
        def __init__(self, settings=None, observer=None):
            super().__init__(settings, observer or batches)

    embedded_site.WorkerPools = ObservedPools  # where the job's site makes its pools
    stages = StageClock()
    load_before = load_average()
    cpu_begin = cpu_seconds()
    begin = time.monotonic()
    extraction = ExtractionClock()
    with ms.Profiler() as profiler, extraction.observing(), \
            (sized_searches(size) if size is not None else contextlib.nullcontext()):
        result = submit(SubmitRequest(model=args.model, target="llvm", batch=args.batch, registry=registry,
                                      trials_per_task=args.trials_per_task, seed=args.seed),
                        stages)
    end = time.monotonic()
    cpu_end = cpu_seconds()
    if result.job.state != "succeeded":
        sys.exit(f"the job did not succeed: {result.job.state}: {result.job.error}")
    trials = result.report.trials if result.report else 0
    spans = stages.durations(end)
    tuning_s = spans.get("running", 0.0)
    scopes = {name: float(seconds) for name, seconds in profiler.get().items()}
    tasks = result.report.tasks if result.report else []
    model_s = (scopes.get("EvoSearch/Evolve/PredictNormalizedScore", 0.0)
               + scopes.get("MeasureCallback/UpdateCostModel", 0.0))
    estimate = (sum(t.best_sec * t.weight for t in tasks) * 1e3
                if tasks and all(t.best_sec is not None for t in tasks) else None)
    return {
        "search": "plan" if size is None else f"{size.population}:{size.generations}",
        "cpu": cpu_model(), "cores": os.cpu_count(), "load_before": load_before, "load_after": load_average(),
        "model": args.model, "batch": args.batch, "seed": args.seed, "trials": trials, "wall_s": end - begin,
        "trials_per_s_tuning": trials / tuning_s if tuning_s else None,
        "stages_s": spans,
        "tuning": {"search_s": search_seconds(scopes), "build_s": batches.build_s, "measure_s": batches.measure_s,
                   "built": batches.candidates_built, "measured": batches.candidates_measured},
        "cpu_s": {"farm_process": cpu_end[0] - cpu_begin[0], "worker_processes": cpu_end[1] - cpu_begin[1]},
        "metaschedule_scopes_s": dict(sorted(scopes.items(), key=lambda kv: -kv[1])),
        # the cost model's prediction in the search and its updates after each measured batch, and
        # the stored models' refresh after the job (its "learned" stage: the cross model's)
        "cost_model": {"s": model_s, "share_of_tuning": model_s / tuning_s if tuning_s else None,
                       "refresh_after_job_s": spans.get("learned", 0.0),
                       "feature_extraction_s": extraction.seconds, "candidates_extracted": extraction.candidates,
                       "start": result.report.cost_model_start if result.report else None},
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "registry": registry,
        # the tuner's measured best of each task x its calls: the latency the search reached, free of
        # the end-to-end timing's noise (the tuned tasks only)
        "tasks_estimate_ms": estimate,
        "artifact_latency_ms": result.artifact.latency_median_ms if result.artifact else None,
    }


def interleaved_latency(reports: list[dict], args) -> None:
    """Each job's library, loaded from its registry, timed in rotated rounds (bench/timing.py): the
    latency each search setting reached, one timing for all."""
    from timing import Engine, interleaved

    import farm

    engines, inputs = [], None
    for report in reports:
        deployed = farm.load(args.model, "llvm", batch=args.batch, registry=report["registry"])
        inputs = inputs or deployed.example_inputs(0)
        timer = deployed.library.timer(inputs)
        engines.append(Engine(f"{len(engines)}:{report['search']}", run=deployed.library,
                              sample_ms=lambda _inputs, timer=timer: timer()))
    samples = interleaved(engines, inputs, args.runs, warmup=3, rounds=args.rounds)
    for report, engine in zip(reports, engines):
        report["interleaved"] = samples[engine.name].summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0, help="the job's seed (the same for every setting)")
    parser.add_argument("--search", type=search_setting, action="append", default=None, metavar="POP:GENS",
                        help="a search size every task gets (population:generations), or 'plan' for the farm's"
                             " own; repeat to set one against another, each a job into a fresh registry, then"
                             " their libraries timed interleaved (default: plan)")
    parser.add_argument("--runs", type=int, default=60, help="interleaved timed runs per library (with --search)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--registry", default=None,
                        help="one setting only; default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = args.search or [None]
    if args.registry and len(settings) > 1:
        parser.error("--registry takes one --search setting")

    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    install_lean_tensor_intrinsics("llvm")
    reports = []
    for size in settings:
        registry = args.registry or f"sqlite:///{tempfile.mkdtemp(prefix='trial-cost-')}/registry.db"
        reports.append(run_job(args, size, registry))
        if not args.json:
            print_job(reports[-1], flush=True)
    if args.search:
        interleaved_latency(reports, args)
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
        return
    if args.search:
        print_comparison(reports)


def print_job(report: dict, flush: bool = False) -> None:
    tuning_s = report["stages_s"].get("running", 0.0)
    t = report["tuning"]
    print(f"{report['model']} b{report['batch']}, search {report['search']}, {report['trials']} trials, "
          f"{report['wall_s']:.0f} s wall on {report['cpu']} (load {report['load_before']} before)")
    for state, seconds in report["stages_s"].items():
        print(f"  stage {state:<12} {seconds:8.1f} s")
    other = tuning_s - t["build_s"] - t["measure_s"]
    print(f"  in tuning: build {t['build_s']:.1f} s ({t['built']} candidates), measure "
          f"{t['measure_s']:.1f} s ({t['measured']}), the rest (search, cost model, commits) "
          f"{other:.1f} s, of it the search {t['search_s']:.1f} s; {report['trials_per_s_tuning']:.2f} trials/s")
    model = report["cost_model"]
    print(f"  cost model: prediction + updates {model['s']:.1f} s ({100 * (model['share_of_tuning'] or 0):.1f}% of "
          f"tuning), refresh after the job {model['refresh_after_job_s']:.1f} s; started from "
          f"{model['start'] or 'nothing stored'}")
    print(f"  of it MetaSchedule's feature extraction {model['feature_extraction_s']:.1f} s "
          f"({model['candidates_extracted']} candidates)")
    print(f"  CPU: farm process {report['cpu_s']['farm_process']:.1f} s, worker processes "
          f"{report['cpu_s']['worker_processes']:.1f} s")
    print("  MetaSchedule's profiler (wall s, nested scopes overlap):")
    for name, seconds in list(report["metaschedule_scopes_s"].items())[:15]:
        print(f"    {seconds:8.1f}  {name}")
    print(f"  latency: tasks' best x calls {report['tasks_estimate_ms'] or float('nan'):.2f} ms, validated "
          f"{report['artifact_latency_ms'] or float('nan'):.2f} ms")
    print(f"registry: {report['registry']} (time the library against onnxruntime: bench/compare.py --registry ...)",
          flush=flush)


def print_comparison(reports: list[dict]) -> None:
    base = reports[0]
    print(f"\n{base['model']} b{base['batch']}, {base['trials']} trials a setting, seed {base['seed']}, "
          f"on {base['cpu']}; interleaved: median ms (IQR) over {base['interleaved']['runs']} runs")
    print(f"  {'search':>8} {'trials':>6} {'tuning s':>8} {'trials/s':>8} {'vs 1st':>6} {'search s':>8} "
          f"{'build s':>7} {'run s':>6} {'tasks ms':>8} {'validated':>9} {'interleaved':>16}")
    for r in reports:
        t, i = r["tuning"], r["interleaved"]
        print(f"  {r['search']:>8} {r['trials']:>6} {r['stages_s'].get('running', 0.0):>8.1f} "
              f"{r['trials_per_s_tuning']:>8.2f} {r['trials_per_s_tuning'] / base['trials_per_s_tuning']:>5.2f}x "
              f"{t['search_s']:>8.1f} {t['build_s']:>7.1f} {t['measure_s']:>6.1f} "
              f"{r['tasks_estimate_ms'] or float('nan'):>8.2f} {r['artifact_latency_ms'] or float('nan'):>9.2f} "
              f"{i['median_ms']:>8.2f} ({i['iqr_ms']:.2f})")


if __name__ == "__main__":
    main()
