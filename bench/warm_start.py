"""Warm starts against cold ones: tune a donor model, then a similar model cold and warm at one budget.

The donor (default resnet-tiny at batch 4) is tuned once, cold, into a registry of its own.
Then, for each search seed, the target model (default resnet-tiny at batch 1) is tuned twice
from copies of that registry at the same budget: cold (`--cold`: no seeds, no pretrained cost
model) and warm (the farm's default). Reuse of exact workloads is off for both: this measures
transfer only. For each run it takes the job's best estimated model latency after each trial
(`farm report`'s curve: the sum of each task's best measured time by its weight; until every
task has one, the others counted at their FLOPs at the measured tasks' rate) and the library's
end-to-end latency timed after tuning. It prints the trials warm needs to reach cold's final
estimated latency (and that as a share of cold's trials), counted only where every task was
measured, the trial after which every task was, and warm/cold latency at equal budget, each
with its spread over seeds; it plots best latency against trials for every run (dotted while
some tasks are estimated).

    .venv/bin/python bench/warm_start.py [--donor resnet-tiny --donor-batch 4 --donor-trials-per-task 16]
        [--model resnet-tiny --batch 1 --trials-per-task 8] [--seeds 0 1] [--plot docs/results/warm-start.png] [--json]
        [--donor-registry donors.db] [--parallel]

The issue's second pair is any other donor and model of the zoo, e.g. `--donor bert-tiny
--donor-batch 4 --model bert-tiny --batch 1` or `--donor squeezenet_v1.1 --donor-batch 4 --model
squeezenet_v1.1 --batch 1`: every job is a default submit (auto weights layout).

`--donor-registry` starts from a registry file where the donor is tuned already (a copy is
used). `--donor-packs DIR` starts from the packs in DIR instead (a new registry that loaded them,
as a fresh farm does its shipped packs): on a box kind no pack holds, what the farm's first run
gains from the packs of other CPU kinds, e.g. `--donor-packs foundation/registry/shipped
--model resnet-18 --trials-per-task 32 --seeds 0 1 2`. `--parallel` tunes each seed's cold and
warm runs at the same time, in two processes: the two share the box's load alike, and the run takes half as long.

Exit codes: 0 done; 2 bad arguments; 1 a job that did not succeed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402


def _submit(registry: Path, model: str, batch: int, trials_per_task: int, seed: int, warm: bool):
    from farm.embedded import submit
    from farm.submit_values import SubmitRequest

    request = SubmitRequest(model=model, target="llvm", batch=batch, registry=f"sqlite:///{registry}",
                            trials_per_task=trials_per_task, seed=seed, warm_start=warm, reuse="off",
                            # Both runs tune: a library already stored (the donor's, or one of a compatible
                            # fingerprint, the same CPU at another core count) would answer the submit.
                            retune=True, validation_runs=20)
    result = submit(request)
    if result.job.state != "succeeded":
        raise SystemExit(f"error: {model} batch {batch} ({'warm' if warm else 'cold'}) ended {result.job.state}: "
                         f"{result.job.error}")
    with sqlite3.connect(registry) as connection:  # copies are taken of the file alone
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return result


def _run(registry: Path, model: str, batch: int, trials_per_task: int, seed: int, warm: bool) -> dict:
    result = _submit(registry, model, batch, trials_per_task, seed, warm)
    summary = result.to_json()
    return {
        "seed": seed, "warm": warm, "job": result.job.id, "trials": result.report.trials,
        "curve": _curve(registry, result.job.id),
        "latency_ms": result.artifact.latency_mean_ms,
        "untuned_latency_ms": result.artifact.untuned_latency_mean_ms,
        "warm_start": summary.get("warm_start"),
        "tuning_seconds": summary.get("tuning_seconds"),
    }


def _run_in_process(registry: Path, args, seed: int, warm: bool):
    """One run in a process of its own; returns the Popen whose stdout is the run's JSON."""
    import subprocess

    command = [sys.executable, __file__, "--one-run", str(registry), "--model", args.model, "--batch",
               str(args.batch), "--trials-per-task", str(args.trials_per_task), "--seeds", str(seed)]
    if warm:
        command.append("--warm")
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=os.environ.copy())


def _curve(registry: Path, job_id: str) -> list[tuple[int, float, int]]:
    """`farm report`'s model curve: (trials, estimated latency in seconds, tasks not yet measured)."""
    from farm.report import job_report
    from foundation.registry.store import RegistryStore

    store = RegistryStore(f"sqlite:///{registry}", create=False)
    try:
        return [tuple(point) for point in job_report(store, job_id).model_curve]
    finally:
        store.dispose()


def _registry_of_packs(registry: Path, directory: Path) -> dict:
    """A new registry at ``registry`` that loaded the packs in ``directory``: what they added."""
    from foundation.registry.shipped_packs import load_shipped_packs
    from foundation.registry.store import RegistryStore

    store = RegistryStore(f"sqlite:///{registry}", create=True)
    try:
        loaded = load_shipped_packs(store, directory)
    finally:
        store.dispose()
    with sqlite3.connect(registry) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {"packs": sorted(loaded), "added": {name: counts.to_json() for name, counts in loaded.items()}}


def _donor_of(registry: Path, model: str, batch: int) -> dict:
    """The donor job already in ``registry``: its trials and its library's latency."""
    from foundation.registry.store import RegistryStore

    store = RegistryStore(f"sqlite:///{registry}", create=False)
    try:
        job = next(j for j in store.list_jobs() if j.state == "succeeded" and j.artifact_id)
        artifact = store.get_artifact(job.artifact_id)
        return {"trials": job.trials_done, "latency_ms": artifact.latency_mean_ms, "job": job.id}
    finally:
        store.dispose()


def _counted(curve: list[tuple[int, float, int]]) -> list[tuple[int, float]]:
    """The curve's points where every task the run ever measures has a measured schedule. Tasks the
    plan gives no trial (the smallest, at small budgets) are never measured; the report counts them at
    their untuned or estimated time at every point, alike in both runs of a pair."""
    never = curve[-1][2] if curve else 0
    return [(trials, value) for trials, value, unmeasured in curve if unmeasured <= never]


def _trials_to_reach(curve: list[tuple[int, float, int]], latency: float) -> int | None:
    """The first trial whose estimate, every task measured, is at or below ``latency``."""
    return next((trials for trials, value in _counted(curve) if value <= latency), None)


def _final(curve: list[tuple[int, float, int]]) -> float | None:
    """The last estimate with every task measured (None: a run that never measured them all)."""
    counted = _counted(curve)
    return counted[-1][1] if counted else None


def _every_task_measured_at(curve: list[tuple[int, float, int]]) -> int | None:
    counted = _counted(curve)
    return counted[0][0] if counted else None


def _spread(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "median": None, "min": None, "max": None, "stdev": None}
    return {"mean": statistics.mean(values), "median": statistics.median(values), "min": min(values),
            "max": max(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def _pairs(runs: list[dict], seeds: list[int]) -> list[dict]:
    """Cold against warm, per seed, from the runs' curves and timings."""
    pairs = []
    for seed in seeds:
        cold = next(r for r in runs if r["seed"] == seed and not r["warm"])
        warm = next(r for r in runs if r["seed"] == seed and r["warm"])
        cold_final, warm_final = _final(cold["curve"]), _final(warm["curve"])
        reach = None if cold_final is None else _trials_to_reach(warm["curve"], cold_final)
        pairs.append({
            "seed": seed,
            "cold_trials": cold["trials"], "warm_trials": warm["trials"],
            "every_task_measured_after": {"cold": _every_task_measured_at(cold["curve"]),
                                          "warm": _every_task_measured_at(warm["curve"])},
            "tasks_never_measured": {"cold": cold["curve"][-1][2] if cold["curve"] else None,
                                     "warm": warm["curve"][-1][2] if warm["curve"] else None},
            "warm_trials_to_cold_final": reach,
            "share_of_cold_trials": None if reach is None else reach / cold["trials"],
            "estimated_ratio": None if cold_final is None or warm_final is None else warm_final / cold_final,
            "measured_ratio": warm["latency_ms"] / cold["latency_ms"],
            "cold_latency_ms": cold["latency_ms"], "warm_latency_ms": warm["latency_ms"],
            "untuned_latency_ms": cold["untuned_latency_ms"],
            "seeds": warm["warm_start"],
        })
    return pairs


def _summarised(document: dict, pairs: list[dict]) -> dict:
    return {**document, "pairs": pairs,
            "share_of_cold_trials": _spread([p["share_of_cold_trials"] for p in pairs]),
            "estimated_ratio": _spread([p["estimated_ratio"] for p in pairs]),
            "measured_ratio": _spread([p["measured_ratio"] for p in pairs])}


def _title(document: dict) -> str:
    model, donor = document["model"], document["donor"]
    source = (f"packs {', '.join(donor['packs'])}" if "packs" in donor
              else f"{donor['model']} b{donor['batch']} ({donor['trials']} trials)")
    return (f"{model['model']} b{model['batch']}, {model['trials_per_task']} trials/task; warm from {source}"
            f"\n{document['cpu']}, load {document['load_before']}")


def _plot(runs: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in runs:
        style = {"color": "tab:orange" if run["warm"] else "tab:blue", "alpha": 0.85, "linewidth": 1.4}
        never = run["curve"][-1][2] if run["curve"] else 0
        estimated = [p for p in run["curve"] if p[2] > never]
        measured = [p for p in run["curve"] if p[2] <= never]
        if estimated:  # some tasks not measured yet: drawn dotted, up to the first measured point
            joined = estimated + measured[:1]
            ax.step([p[0] for p in joined], [p[1] * 1e3 for p in joined], where="post", linestyle=":", **style)
        ax.step([p[0] for p in measured], [p[1] * 1e3 for p in measured], where="post",
                label=f"{'warm' if run['warm'] else 'cold'} (seed {run['seed']})",
                linestyle="-" if run["seed"] == runs[0]["seed"] else "--", **style)
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best estimated model latency (ms)")
    ax.set_title(title, fontsize=9)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--donor", default="resnet-tiny")
    parser.add_argument("--donor-batch", type=int, default=4)
    parser.add_argument("--donor-trials-per-task", type=int, default=16)
    parser.add_argument("--model", default="resnet-tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--trials-per-task", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "results" / "warm-start.png")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--donor-registry", type=Path)
    parser.add_argument("--donor-packs", type=Path, metavar="DIR",
                        help="warm from the .farmpack files in DIR (a new registry that loaded them), not a donor tune")
    parser.add_argument("--parallel", action="store_true")
    parser.add_argument("--resummarise", type=Path, metavar="JSON",
                        help="recompute a saved run's pairs and plot (its curves and timings) with this script's rules")
    parser.add_argument("--one-run", type=Path, help=argparse.SUPPRESS)  # a --parallel child
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_run is not None:
        print(json.dumps(_run(args.one_run, args.model, args.batch, args.trials_per_task, args.seeds[0], args.warm)))
        return 0
    if args.resummarise is not None:
        saved = json.loads(args.resummarise.read_text())
        document = _summarised(saved, _pairs(saved["runs"], [p["seed"] for p in saved["pairs"]]))
        document["resummarised"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        _plot(document["runs"], Path(document["plot"]), _title(document))
        args.resummarise.write_text(json.dumps(document, indent=1) + "\n")
        print(json.dumps({k: document[k] for k in ("share_of_cold_trials", "estimated_ratio", "measured_ratio")}))
        return 0
    if min(args.donor_batch, args.batch, args.trials_per_task, args.donor_trials_per_task) < 1:
        print("error: batches and trial budgets must be positive (pass numbers >= 1)", file=sys.stderr)
        return 2
    if args.donor_registry is not None and not args.donor_registry.is_file():
        print(f"error: no registry file at {args.donor_registry} (pass a SQLite file where the donor is tuned, "
              "or leave --donor-registry out to tune the donor)", file=sys.stderr)
        return 2

    if args.donor_packs is not None and not list(args.donor_packs.glob("*.farmpack")):
        print(f"error: no .farmpack file in {args.donor_packs} (pass a directory of packs, such as "
              "foundation/registry/shipped)", file=sys.stderr)
        return 2

    # A SIGTERM ends this process through its finally blocks, which stop the --parallel runs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    work = Path(tempfile.mkdtemp(prefix="farm-warm-bench-"))
    os.environ["FARM_HOME"] = str(work / "home")
    begin = time.monotonic()
    load_before = load_average()
    print(f"work directory {work}", file=sys.stderr)
    try:
        donors = work / "donors.db"
        if args.donor_registry is not None:
            shutil.copy(args.donor_registry, donors)
            donor = _donor_of(donors, args.donor, args.donor_batch)
        elif args.donor_packs is not None:
            donor = _registry_of_packs(donors, args.donor_packs)
        else:
            print(f"[{time.monotonic() - begin:6.0f}s] donor: {args.donor} batch {args.donor_batch}, "
                  f"{args.donor_trials_per_task} trials per task, cold", file=sys.stderr)
            result = _submit(donors, args.donor, args.donor_batch, args.donor_trials_per_task, 0, warm=False)
            donor = {"trials": result.report.trials, "latency_ms": result.artifact.latency_mean_ms}
        runs = []
        for seed in args.seeds:
            registries = {}
            for warm in (False, True):
                registries[warm] = work / f"{'warm' if warm else 'cold'}-{seed}.db"
                shutil.copy(donors, registries[warm])
            print(f"[{time.monotonic() - begin:6.0f}s] {args.model} batch {args.batch}, cold and warm, seed {seed}"
                  + (" (at once)" if args.parallel else ""), file=sys.stderr)
            if args.parallel:
                children = [_run_in_process(registries[warm], args, seed, warm) for warm in (False, True)]
                try:
                    for child in children:
                        out, _ = child.communicate()
                        if child.returncode != 0:
                            raise SystemExit(f"error: a run of seed {seed} failed (exit {child.returncode})")
                        runs.append(json.loads(out.strip().splitlines()[-1]))
                finally:  # stopped or failed: a run left tuning would skew whatever the box measures next
                    for child in children:
                        if child.poll() is None:
                            child.kill()
                            child.wait()
            else:
                runs.extend(_run(registries[warm], args.model, args.batch, args.trials_per_task, seed, warm)
                            for warm in (False, True))
    except BaseException:
        print(f"the runs' registries are kept in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)

    document = {
        "command": "bench/warm_start.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "load_before": load_before, "load_after": load_average(),
        "seconds": round(time.monotonic() - begin, 1),
        "donor": donor if "packs" in donor else {"model": args.donor, "batch": args.donor_batch, **donor},
        "model": {"model": args.model, "batch": args.batch, "trials_per_task": args.trials_per_task},
        "runs": runs,
    }
    document = _summarised(document, _pairs(runs, args.seeds))
    _plot(runs, args.plot, _title(document))
    document["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(document, indent=1))
        return 0
    print(f"{document['date']}  {document['cpu']}  load before {load_before} after {document['load_after']}  "
          f"{document['seconds']:.0f} s")
    if "packs" in donor:
        print(f"donor packs {', '.join(donor['packs'])}")
    else:
        print(f"donor {args.donor} b{args.donor_batch}: {donor['trials']} trials, {donor['latency_ms']:.3f} ms")
    print("| seed | cold trials | every task measured after, cold / warm | warm trials to cold's final | share "
          "| warm/cold est. | warm/cold measured | cold ms | warm ms | untuned ms | seeds (own/other) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for p in document["pairs"]:
        share = "never" if p["share_of_cold_trials"] is None else f"{p['share_of_cold_trials']:.0%}"
        seeds = p["seeds"] or {}
        every = p["every_task_measured_after"]
        estimated = "-" if p["estimated_ratio"] is None else f"{p['estimated_ratio']:.2f}"
        print(f"| {p['seed']} | {p['cold_trials']} | {every['cold']} / {every['warm']} | "
              f"{p['warm_trials_to_cold_final'] or 'never'} | {share} | "
              f"{estimated} | {p['measured_ratio']:.2f} | {p['cold_latency_ms']:.3f} | "
              f"{p['warm_latency_ms']:.3f} | {p['untuned_latency_ms']:.3f} | "
              f"{seeds.get('seeds_own_fingerprint')}/{seeds.get('seeds_other_fingerprints')} |")
    for name in ("share_of_cold_trials", "estimated_ratio", "measured_ratio"):
        s = document[name]
        if s["mean"] is not None:
            print(f"{name}: median {s['median']:.3f}, mean {s['mean']:.3f}, min {s['min']:.3f}, "
                  f"max {s['max']:.3f}, stdev {s['stdev']:.3f}")
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
