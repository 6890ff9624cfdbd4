"""Per-operator profile of the farm-tuned model against onnxruntime's, side by side: where the time goes.

TVM 0.27's Relax VirtualMachine has no profiler (no `profile=True`, no `vm.profile`); its
instrument hook (`VirtualMachine.set_instrument`) is called before and after every call the VM
makes, kernels and its own builtins (allocation, shape checks) alike, and is timed here with
perf_counter around each call. onnxruntime's own profiler (`SessionOptions.enable_profiling`)
gives each node's kernel time. Both run the same network with the same weights
(bench/relax_graph.py) on the same input, on this process's threads; the kernels are grouped
into kinds (convolution, matmul, ...) so the two engines' fusions can be set against each other.
The whole model is also timed without any profiling, to show what the instrumentation costs.

    FARM_HOME=... .venv/bin/python bench/profile.py resnet-18 [--batch 1] [--runs 20] [--top 12] [--out F.json]

Exit codes: 0 done; 2 bad arguments; 3 no tuned library for the model in the registry; 4 a registry
that cannot be read.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402
from tuned_library import load_tuned_library  # noqa: E402

TARGET = "llvm"
# First match wins: a TVM kernel named fused_conv2d_multiply_add_relu is a convolution.
KINDS = (
    ("convolution", ("conv",)),
    ("matmul", ("matmul", "gemm", "dense", "attention")),
    ("pooling", ("pool",)),
    ("softmax", ("softmax",)),
    ("layer norm", ("layer_norm", "layernorm", "skiplayernorm")),
    ("gelu", ("gelu", "erf")),
    ("data movement", ("transpose", "permute", "reshape", "split", "take", "gather", "concat", "cast", "astype",
                       "slice", "identity", "expand")),
    ("VM builtins", ("vm.builtin", "alloc", "null_value")),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, words in KINDS:
        if any(word in low for word in words):
            return kind
    return "elementwise, other"


class OpTimes:
    """Accumulated seconds and calls per operator name, over ``runs`` inferences."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter = collections.Counter()

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1

    def per_inference(self, runs: int) -> list[dict]:
        total = sum(self.seconds.values())
        rows = [{"op": name, "kind": kind_of(name), "ms": s / runs * 1e3, "calls": self.calls[name] / runs,
                 "share": s / total if total else 0.0} for name, s in self.seconds.items()]
        return sorted(rows, key=lambda r: -r["ms"])


def profile_tvm(library, inputs, runs: int) -> OpTimes:
    import tvm_ffi

    times, started = OpTimes(), []

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started.append(time.perf_counter())
        else:
            times.add(str(symbol), time.perf_counter() - started.pop())
        return 0  # relax.VMInstrumentReturnKind.NO_OP: run the call as usual

    library([*inputs])  # the first call allocates the pools: not profiled
    library.vm.set_instrument(tvm_ffi.convert(instrument))
    for _ in range(runs):
        library(inputs)
    return times


def ort_session(model, weights, profile_dir: str | None):
    import onnxruntime as ort
    from relax_graph import to_onnx

    options = ort.SessionOptions()
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(profile_dir, "ort")
    return ort.InferenceSession(to_onnx(model.mod, weights).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def profile_ort(model, weights, inputs, runs: int) -> tuple[OpTimes, dict]:
    feeds = {spec.name: x for spec, x in zip(model.inputs, inputs)}
    with tempfile.TemporaryDirectory(prefix="farm-ort-profile-") as tmp:
        session = ort_session(model, weights, tmp)
        session.run(None, feeds)  # warm-up, also profiled: its events are dropped below
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    node_events = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    per_run = len(node_events) // (runs + 1)
    times = OpTimes()
    for event in node_events[per_run:]:  # the warm-up run's nodes come first
        times.add(event["args"].get("op_name", event["name"]), event["dur"] / 1e6)
    nodes = collections.Counter(e["args"].get("op_name", "?") for e in node_events[:per_run])
    return times, {"nodes_per_run": per_run, "node_types": dict(nodes)}


def whole_model_ms(run, runs: int) -> float:
    run()
    samples = []
    for _ in range(runs):
        begin = time.perf_counter()
        run()
        samples.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--registry", default=None)
    parser.add_argument("--runs", type=int, default=20, help="profiled inferences per engine")
    parser.add_argument("--top", type=int, default=12, help="operators listed per engine")
    parser.add_argument("--out", type=Path, default=None, help="also write the profile as JSON here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.top < 1:
        print("error: --runs and --top must be at least 1 (pass positive counts)", file=sys.stderr)
        return 2

    from foundation.errors import FarmError
    from foundation.models.zoo import ZOO

    if args.model not in ZOO:  # before TVM's import, which costs seconds
        print(f"error: unknown model '{args.model}' (zoo models: {', '.join(ZOO)})", file=sys.stderr)
        return 2
    try:  # a missing registry is refused before TVM's import
        tuned = load_tuned_library(args.model, args.batch, args.registry, TARGET)
    except FarmError as err:  # an unknown model (2), no tuned library (3), an unreadable registry (4)
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    model, weights, inputs, deployed = tuned.model, tuned.weights, tuned.inputs, tuned.deployed
    load_before = load_average()
    feeds = {spec.name: x for spec, x in zip(model.inputs, inputs)}
    plain_session = ort_session(model, weights, None)
    timed_runs = max(5, args.runs // 2)
    whole = {"TVM farm-tuned": whole_model_ms(lambda: deployed.library(inputs), timed_runs),
             "onnxruntime": whole_model_ms(lambda: plain_session.run(None, feeds), timed_runs)}
    tvm_times = profile_tvm(deployed.library, inputs, args.runs)
    ort_times, ort_graph = profile_ort(model, weights, inputs, args.runs)

    tvm_rows, ort_rows = tvm_times.per_inference(args.runs), ort_times.per_inference(args.runs)
    kinds = collections.defaultdict(lambda: {"TVM farm-tuned": 0.0, "onnxruntime": 0.0})
    for engine, rows in (("TVM farm-tuned", tvm_rows), ("onnxruntime", ort_rows)):
        for row in rows:
            kinds[row["kind"]][engine] += row["ms"]
    report = {
        "model": args.model, "batch": args.batch, "artifact": deployed.artifact.id,
        "weights_layout": deployed.artifact.weights_layout,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(), "loadavg_before": load_before, "loadavg_after": load_average(),
        "runs": args.runs, "tvm_threads": os.environ.get("TVM_NUM_THREADS"),
        "whole_model_median_ms": whole,
        "profiled_sum_ms": {"TVM farm-tuned": sum(r["ms"] for r in tvm_rows),
                            "onnxruntime": sum(r["ms"] for r in ort_rows)},
        "kinds_ms": dict(sorted(kinds.items(), key=lambda kv: -kv[1]["TVM farm-tuned"])),
        "tvm_ops": tvm_rows, "onnxruntime_ops": ort_rows, "onnxruntime_graph": ort_graph,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report, args.top)
    return 0


def print_report(r: dict, top: int) -> None:
    print(f"{r['model']} batch {r['batch']} ({r['artifact']}) on {r['cpu']}, {r['date_utc']}, "
          f"load average {r['loadavg_before'][0]} -> {r['loadavg_after'][0]}, TVM threads {r['tvm_threads']}")
    w, p = r["whole_model_median_ms"], r["profiled_sum_ms"]
    print(f"whole model, unprofiled median: TVM farm-tuned {w['TVM farm-tuned']:.2f} ms, onnxruntime "
          f"{w['onnxruntime']:.2f} ms ({w['TVM farm-tuned'] / w['onnxruntime']:.2f}x); sum of profiled ops per "
          f"inference: TVM {p['TVM farm-tuned']:.2f} ms, onnxruntime {p['onnxruntime']:.2f} ms")
    print(f"onnxruntime ran {r['onnxruntime_graph']['nodes_per_run']} nodes per inference after its graph "
          f"optimizations: {r['onnxruntime_graph']['node_types']}")
    print(f"\n{'kind':22s} {'TVM ms':>9s} {'ORT ms':>9s} {'TVM/ORT':>8s}")
    for kind, ms in r["kinds_ms"].items():
        t, o = ms["TVM farm-tuned"], ms["onnxruntime"]
        print(f"{kind:22s} {t:9.3f} {o:9.3f} {(t / o if o else float('inf')):8.2f}")
    print(f"\n{'TVM farm-tuned: top ops':56s} {'ms':>8s} {'calls':>5s} {'share':>6s}   "
          f"{'onnxruntime: top ops':24s} {'ms':>8s} {'calls':>5s} {'share':>6s}")
    for index in range(min(top, max(len(r["tvm_ops"]), len(r["onnxruntime_ops"])))):
        left = r["tvm_ops"][index] if index < len(r["tvm_ops"]) else None
        right = r["onnxruntime_ops"][index] if index < len(r["onnxruntime_ops"]) else None
        text = (f"{left['op'][:56]:56s} {left['ms']:8.3f} {left['calls']:5.0f} {left['share']:6.1%}" if left
                else " " * 79)
        if right:
            text += f"   {right['op'][:24]:24s} {right['ms']:8.3f} {right['calls']:5.0f} {right['share']:6.1%}"
        print(text)


if __name__ == "__main__":
    sys.exit(main())
