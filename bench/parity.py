"""Trials to parity: a model's farm-tuned latency against onnxruntime's as its trials grow.

Each step is one `bench/evaluate.py MODEL:BATCH:STEP` run in its own process (the first tunes,
the later ones `--retune`: the registry keeps every record, so each step adds about STEP trials
a task to what the model has, warm-started from it), which times the farm-tuned library and
onnxruntime interleaved in the same minute. The point kept per step: the model's trials so far,
both medians, their ratio, the step's wall time. The report (OUT, JSON) is written after every
step and a rerun with the same OUT resumes from it, so the curve can be taken in pieces on a
box that has other work between them. The run stops when the total reaches --until-trials, after
--max-steps steps in this invocation, or once the farm's latency is at or below onnxruntime's
(--past-parity keeps going); a curve that flattens is read off the report.

    .venv/bin/python bench/parity.py resnet-18:1 --step 24 --until-trials 2000 \
        --registry sqlite:////tmp/parity/registry.db --out docs/results/parity-resnet-18-b1.json

Exit codes: 0 done (or stopped by --max-steps); 1 an evaluation step failed; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from timing import cpu_model, load_average  # noqa: E402

EVALUATE = ROOT / "bench" / "evaluate.py"


def evaluate_step(case: str, step: int, retune: bool, args) -> dict:
    """One evaluate.py run: tune STEP more trials a task (or the first STEP), then time; its case's report."""
    with tempfile.TemporaryDirectory(prefix="parity-") as out:
        command = [sys.executable, str(EVALUATE), f"{case}:{step}", "--out", out, "--tag", "step", "--no-plots",
                   "--untuned-runs", "0", "--runs", str(args.runs), "--rounds", str(args.rounds)]
        if args.registry:
            command += ["--registry", args.registry]
        if retune:
            command.append("--retune")
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=sys.stderr, text=True)
        if done.returncode != 0:
            raise SystemExit(f"error: evaluate.py exited {done.returncode} on {case}:{step}; the report keeps "
                             f"the steps before it") from None
        (report,) = json.loads((Path(out) / "evaluate-step.json").read_text())["cases"]
        return report


def point(report: dict, step: int, wall_s: float) -> dict:
    engines = report["engines"]
    farm_ms = engines["TVM farm-tuned"]["median_ms"]
    ort_ms = engines.get("onnxruntime", {}).get("median_ms")
    return {"trials": report["tuning"]["trials"], "jobs": len(report["tuning"]["jobs"]), "step_trials_per_task": step,
            "farm_ms": farm_ms, "onnxruntime_ms": ort_ms,
            "farm_over_onnxruntime": farm_ms / ort_ms if ort_ms else None,
            "weights_layout": report["artifact"]["weights_layout"], "step_wall_s": wall_s,
            "loadavg_before": report["loadavg_before"], "loadavg_after": report["loadavg_after"],
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", help="MODEL:BATCH, e.g. resnet-18:1")
    parser.add_argument("--step", type=int, default=24, help="trials a task each step adds")
    parser.add_argument("--until-trials", type=int, default=2000, help="stop once the model has this many trials")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps in this run")
    parser.add_argument("--past-parity", action="store_true", help="keep going after reaching onnxruntime")
    parser.add_argument("--registry", default=None, help="registry URL (default: $FARM_REGISTRY, else FARM_HOME's)")
    parser.add_argument("--runs", type=int, default=60, help="timed runs per engine per step")
    parser.add_argument("--rounds", type=int, default=4, help="rotated rounds the runs are split into")
    parser.add_argument("--out", type=Path, required=True, help="the report (JSON); resumed when it exists")
    args = parser.parse_args(argv)
    parts = args.case.split(":")
    if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) < 1 or args.step < 1:
        print(f"error: bad case {args.case!r} or step (write MODEL:BATCH, e.g. resnet-18:1, and --step >= 1)",
              file=sys.stderr)
        return 2

    report = {"case": args.case, "cpu": cpu_model(), "points": []}
    if args.out.exists():
        report = json.loads(args.out.read_text())
        if report["case"] != args.case:
            print(f"error: {args.out} holds {report['case']}, not {args.case}; pass another --out", file=sys.stderr)
            return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    steps = 0
    while True:
        points = report["points"]
        if points and points[-1]["trials"] >= args.until_trials:
            break
        ratio = points[-1]["farm_over_onnxruntime"] if points else None
        if ratio is not None and ratio <= 1.0 and not args.past_parity:
            break
        if args.max_steps is not None and steps >= args.max_steps:
            break
        begin = time.monotonic()
        print(f"{args.case}: step {len(points) + 1} (+{args.step} trials a task), load {load_average()}",
              file=sys.stderr, flush=True)
        case_report = evaluate_step(args.case, args.step, retune=bool(points), args=args)
        points.append(point(case_report, args.step, time.monotonic() - begin))
        report["wall_s"] = sum(p["step_wall_s"] for p in points)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        last = points[-1]
        versus = (f"onnxruntime {last['onnxruntime_ms']:.3f} ms ({last['farm_over_onnxruntime']:.2f}x)"
                  if last["onnxruntime_ms"] else "no onnxruntime")
        print(f"{args.case}: {last['trials']} trials, farm {last['farm_ms']:.3f} ms, {versus}, "
              f"step {last['step_wall_s']:.0f} s", file=sys.stderr, flush=True)
        steps += 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    from _child_signals import pass_signals_to_children

    pass_signals_to_children()
    sys.exit(main())
