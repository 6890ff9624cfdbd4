"""The ceiling: a model's heaviest kernels, GFLOP/s against trials, beside onnxruntime's kernel
for the same operator, numpy's sgemm and the box's peak.

The TOP conv2d/matmul tasks of MODEL (by their share of the model's FLOPs, in the form `farm
submit` tunes by default) are tuned in steps: after a step, each has measured STEP trials in all
(the registry keeps them, so a rerun with more steps resumes). After each step every task's best
record is replayed, built alone and timed (bench/kernels.py's time_kernel). onnxruntime runs the
same network with the same weights (bench/relax_graph.py's export) under its profiler; the ORT
nodes whose FLOPs match a task's main operator (within MATCH_TOLERANCE: a task's FLOPs also count
its fused bias and activation) are that task's counterpart, timed by the profiler's kernel time
(its layout reorders, like TVM's layout tasks, are not in it). Peak: cores x clock x FP32 FLOPs a
core retires per cycle (two FMA pipes x the datapath's lanes x 2) at the clock /proc/cpuinfo
gives, a VM's nominal figure: a kernel can run faster, at the boost clock, and the report says
the clock the fastest rate measured needs at least. The JSON report is written after every
step, so a run cut short keeps what it measured ("complete": false).

    FARM_HOME=... .venv/bin/python bench/ceiling.py resnet-18 [--top 3] [--steps 32,64,128,256,512]
        [--batch 1] [--registry URL] [--ort-runs 20] [--out F.json] [--json]

Exit codes: 0 done; 2 bad arguments; 4 a registry that cannot be read.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kernels import KERNEL_WORDS, TARGET, numpy_sgemm_gflops, time_kernel  # noqa: E402
from timing import cpu_model, load_average  # noqa: E402

MATCH_TOLERANCE = 0.05
ORT_KERNELS = {"Conv": "conv", "FusedConv": "conv", "NchwcConv": "conv",
               "MatMul": "matmul", "FusedMatMul": "matmul", "Gemm": "matmul"}


def peak_gflops(cpuinfo: str | None = None) -> dict:
    """This box's FP32 peak as cores x clock x FLOPs per cycle, with what each factor assumed
    (from `cpuinfo`, the text of /proc/cpuinfo, read when not given)."""
    fields: dict[str, str] = {}
    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    cores = len(os.sched_getaffinity(0))
    mhz = float(fields.get("cpu MHz", "nan"))
    # Family 25 is Zen 3 and Zen 4: only the Zen 4 has AVX-512, and runs it on 256-bit pipes.
    zen4 = (fields.get("vendor_id") == "AuthenticAMD" and fields.get("cpu family") == "25"
            and "avx512f" in flags)
    if "avx512f" in flags and not zen4:
        lanes, why = 16, "AVX-512 on 512-bit FMA pipes"
    elif "avx2" in flags or zen4:
        lanes, why = 8, "Zen 4 runs AVX-512 on 256-bit pipes" if zen4 else "AVX2, 256-bit FMA pipes"
    else:
        lanes, why = 4, "SSE, 128-bit"
    per_cycle = 2 * lanes * 2  # two FMA pipes, each lane's FMA two FLOPs
    return {"cores": cores, "mhz": mhz, "flops_per_cycle_per_core": per_cycle, "assumed": why,
            "gflops": cores * mhz * 1e6 * per_cycle / 1e9}


def implied_ghz(gflops: float, peak: dict) -> float:
    """The clock at least this rate needs on ``peak``'s cores and pipes: a VM's cpuinfo gives its
    nominal clock, and a kernel (numpy's sgemm, here 192 GFLOP/s against 166 at 2.6 GHz on a Zen 4)
    can run above it, at the boost clock."""
    return gflops / (peak["cores"] * peak["flops_per_cycle_per_core"])


def ort_node_flops(event_args: dict) -> tuple[str, float] | None:
    """(kind, FLOPs) of one onnxruntime profiler node event of a convolution or a matmul."""
    kind = ORT_KERNELS.get(event_args.get("op_name", ""))
    if kind is None:
        return None
    shapes = [next(iter(entry.values())) for entry in event_args.get("input_type_shape", [])]
    outputs = [next(iter(entry.values())) for entry in event_args.get("output_type_shape", [])]
    if len(shapes) < 2 or not outputs:
        return None
    if kind == "conv":
        # NCHW and NCHWc alike hold N, P, Q at 0, 2, 3; the weight's elements are K x C/groups x R x S.
        out = outputs[0]
        return kind, 2.0 * math.prod(shapes[1]) * out[0] * out[2] * out[3]
    a, b = shapes[0], shapes[1]
    return kind, 2.0 * math.prod(a) * b[-1]


def ort_kernels(model, weights, inputs, runs: int) -> list[dict]:
    """Every conv/matmul node of one inference: kind, FLOPs, median kernel seconds over ``runs``."""
    # bench/profile.py by its path: `import profile` is the standard library's module.
    spec = importlib.util.spec_from_file_location("bench_profile", ROOT / "bench" / "profile.py")
    bench_profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_profile)

    feeds = {spec.name: x for spec, x in zip(model.inputs, inputs)}
    with tempfile.TemporaryDirectory(prefix="farm-ceiling-ort-") as tmp:
        session = bench_profile.ort_session(model, weights, tmp)
        session.run(None, feeds)  # warm-up, also profiled: dropped below
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    per_run = len(nodes) // (runs + 1)
    by_node: dict[str, list[float]] = {}
    described: dict[str, tuple[str, float]] = {}
    for event in nodes[per_run:]:
        found = ort_node_flops(event.get("args", {}))
        if found is None:
            continue
        by_node.setdefault(event["name"], []).append(event["dur"] / 1e6)
        described[event["name"]] = found
    return [{"node": name.removesuffix("_kernel_time"), "kind": described[name][0], "flop": described[name][1],
             "seconds": statistics.median(samples)} for name, samples in by_node.items()]


def counterpart(task_kind: str, task_flop: float, nodes: list[dict]) -> dict | None:
    """The ORT nodes of ``task_kind`` whose FLOPs are the task's main operator's: their median time."""
    matching = [n for n in nodes if n["kind"] == task_kind and 0 <= task_flop / n["flop"] - 1 <= MATCH_TOLERANCE]
    if not matching:
        return None
    flop = min(n["flop"] for n in matching)
    same = [n for n in matching if n["flop"] == flop]
    seconds = statistics.median(n["seconds"] for n in same)
    return {"nodes": [n["node"] for n in same], "flop": flop, "ms": seconds * 1e3, "gflops": flop / seconds / 1e9}


def task_kind(name: str) -> str:
    return "conv" if "conv2d" in name else "matmul"


# Rounds after a step's first that make up the trials it lost to failed or repeated candidates.
TOPUP_ROUNDS = 3


def measured_trials(database, mod) -> int:
    """How many valid records the registry holds for ``mod``: the trials it has measured."""
    return len(database.get_top_k(database.commit_workload(mod), 1 << 30))


def tune_to(tasks, step: int, target, database, pools, work_dir: Path) -> float:
    """Tune ``tasks`` until each has ``step`` valid records in all; the seconds it took.

    A candidate that fails to build or run, or a schedule measured again (stored once), leaves a
    round short of its trials: up to TOPUP_ROUNDS more rounds make up the difference."""
    from foundation.domain.trial_plan import PlannedTrials, TrialPlan
    from foundation.meta_schedule.tuner import TuningBudget, tune

    seconds = 0.0
    for attempt in range(1 + TOPUP_ROUNDS):
        more = [max(0, step - measured_trials(database, t.mod)) for t in tasks]
        if not any(more):
            break
        plan = TrialPlan(tasks=tuple(PlannedTrials(t.name, n, 1.0 / len(tasks), False, False)
                                     for t, n in zip(tasks, more)),
                         budget=sum(more), per_task_cap=max(more))
        budget = TuningBudget(max_trials_global=sum(more), max_trials_per_task=max(more),
                              num_trials_per_iter=max(1, min(16, max(more))))
        begin = time.monotonic()
        tune(tasks, target, database, budget, work_dir / f"step-{step}-{attempt}", pools=pools, plan=plan)
        seconds += time.monotonic() - begin
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=3, help="how many of the heaviest conv/matmul tasks")
    parser.add_argument("--steps", default="32,64,128,256,512", help="trials each task has measured after each step")
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--ort-runs", type=int, default=20, help="profiled onnxruntime inferences")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats per kernel (each >= 50 ms)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        steps = sorted({int(s) for s in args.steps.split(",")})
    except ValueError:
        steps = []
    if not steps or steps[0] < 1 or args.top < 1 or args.ort_runs < 1 or args.repeat < 1:
        print("error: --steps takes positive trial counts (e.g. 32,64,128); --top, --ort-runs and --repeat "
              "at least 1", file=sys.stderr)
        return 2

    from farm.session import open_context
    from foundation.errors import FarmError
    from foundation.models.zoo import ZOO

    if args.model not in ZOO:  # before TVM's import, which costs seconds
        print(f"error: unknown model '{args.model}' (zoo models: {', '.join(ZOO)})", file=sys.stderr)
        return 2
    try:
        ctx = open_context(args.registry, TARGET, create=True, tuning_here=True)
    except FarmError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics, pin_tvm_threads

    pin_tvm_threads()
    install_lean_tensor_intrinsics(TARGET)
    from foundation.compile import extract_tuning_tasks
    from foundation.domain.weights_layout import weights_layout_for
    from foundation.meta_schedule.database.registry_database import tvm_database_for
    from foundation.meta_schedule.measure import WorkerPools
    from foundation.models.loading import load_model

    layout = weights_layout_for("auto", TARGET)
    model = load_model(args.model, args.batch)
    target = ctx.tvm_target()
    fp = ctx.fingerprint
    ctx.store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)  # the records' owner
    database = tvm_database_for(ctx.store, ctx.fingerprint.id, ctx.target_json, ctx.tvm_version, ctx.software)
    kernels = [t for t in extract_tuning_tasks(model, target, prepack=layout.prepacks,
                                               block_activations=layout.blocks_activations)
               if any(word in t.name for word in KERNEL_WORDS)]
    chosen = sorted(kernels, key=lambda t: -t.flop * t.weight)[:args.top]
    total_flop = sum(t.flop * t.weight for t in kernels)
    print(f"{args.model} b{args.batch} ({layout.value}): the {len(chosen)} heaviest of {len(kernels)} conv/matmul "
          f"tasks, {sum(t.flop * t.weight for t in chosen) / total_flop:.0%} of their FLOPs", file=sys.stderr)

    load_before = load_average()
    weights, inputs = model.make_weights(0), model.make_inputs(0)
    ort_nodes = ort_kernels(model, weights, inputs, args.ort_runs)
    rows = {t.name: {"task": t.name, "weight": t.weight, "gflop": t.flop / 1e9,
                     "onnxruntime": counterpart(task_kind(t.name), t.flop, ort_nodes), "curve": []} for t in chosen}
    sgemm_samples = []
    peak = peak_gflops()
    report = {
        "model": args.model, "batch": args.batch, "weights_layout": layout.value, "fingerprint": ctx.fingerprint.id,
        "cpu": cpu_model(), "loadavg_before": load_before, "tvm_threads": os.environ.get("TVM_NUM_THREADS"),
        "peak": peak, "tasks": list(rows.values()),
    }
    for row in rows.values():
        ort = row["onnxruntime"]
        print(f"  onnxruntime: {row['task'][:44]:44s} "
              + (f"{ort['ms']:.3f} ms {ort['gflops']:.1f} GFLOP/s ({len(ort['nodes'])} nodes)" if ort else "no node"),
              file=sys.stderr, flush=True)

    def write(final: bool) -> None:
        """The report so far (after every step: a run cut short keeps what it measured)."""
        report["date_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        report["loadavg_after"] = load_average()
        report["numpy_sgemm_gflops"] = statistics.median(sgemm_samples) if sgemm_samples else None
        fastest = max([p["gflops"] for r in rows.values() for p in r["curve"]] + sgemm_samples, default=0.0)
        report["implied_ghz_at_least"] = implied_ghz(fastest, peak) if fastest else None
        report["complete"] = final
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="farm-ceiling-") as tmp, WorkerPools() as pools:
        for step in steps:
            seconds = tune_to(chosen, step, target, database, pools, Path(tmp))
            pools.close()  # no worker beside the timing below
            for task in chosen:
                schedule = database.query_schedule(task.mod, target, "main")
                if schedule is None:
                    continue
                neighbour = numpy_sgemm_gflops(repeats=3)["gflops"]
                sgemm_samples.append(neighbour)
                kernel_s = time_kernel(schedule.mod, target, number=1, repeat=args.repeat)
                point = {"trials": measured_trials(database, task.mod), "ms": kernel_s * 1e3,
                         "gflops": task.flop / kernel_s / 1e9, "vs_numpy_sgemm": task.flop / kernel_s / 1e9 / neighbour,
                         "tuning_seconds_this_step": round(seconds, 1)}
                rows[task.name]["curve"].append(point)
                ort = rows[task.name]["onnxruntime"]
                versus = f"  {ort['ms'] / point['ms']:.2f}x onnxruntime's speed" if ort else ""
                print(f"  step {step:4d}: {task.name[:44]:44s} {point['trials']:4d} trials {point['ms']:8.3f} ms "
                      f"{point['gflops']:7.1f} GFLOP/s {point['vs_numpy_sgemm']:5.2f}x sgemm{versus}",
                      file=sys.stderr, flush=True)
            write(final=False)
    write(final=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['cpu']}, {report['date_utc']}, load {load_before[0]} -> {report['loadavg_after'][0]}")
    print(f"peak {peak['gflops']:.0f} GFLOP/s ({peak['cores']} cores x {peak['mhz']:.0f} MHz x "
          f"{peak['flops_per_cycle_per_core']} FLOP/cycle: {peak['assumed']}); numpy sgemm "
          f"{report['numpy_sgemm_gflops'] or float('nan'):.1f} GFLOP/s; the fastest rate here needs at least "
          f"{report['implied_ghz_at_least'] or float('nan'):.2f} GHz")
    for row in report["tasks"]:
        ort = row["onnxruntime"]
        theirs = (f"onnxruntime {ort['gflops']:.1f} GFLOP/s ({ort['ms']:.3f} ms)" if ort
                  else "onnxruntime: no node matched")
        curve = ", ".join(f"{p['trials']}: {p['gflops']:.1f}" for p in row["curve"])
        print(f"{row['task'][:60]} x{row['weight']}: {theirs}; farm GFLOP/s by trials: {curve}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
