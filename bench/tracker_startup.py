"""What a TVM RPC tracker costs to start: `python -m foundation.rpc.single_process tracker` (what
TrackerProcess runs, without its guard) started and timed until it answers a SUMMARY, then stopped
with SIGTERM; with TVM's full library and with `TVM_USE_RUNTIME_LIB=1` (the runtime library only,
TrackerProcess's setting), alternating. CPU is the tracker's, reaped here. Prints the medians; the
figures go in docs/benchmarks.md ("The test suite's time").

    .venv/bin/python bench/tracker_startup.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time

from timing import cpu_model

from foundation.rpc.tracker import TrackerUnreachable, tracker_summary

VARIANTS = {"full TVM": None, "runtime only": "1"}  # TVM_USE_RUNTIME_LIB


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def one_tracker(runtime_only: str | None) -> dict:
    port = free_port()
    env = {name: value for name, value in os.environ.items() if name != "TVM_USE_RUNTIME_LIB"}
    if runtime_only:
        env["TVM_USE_RUNTIME_LIB"] = runtime_only
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    tracker = subprocess.Popen([sys.executable, "-m", "foundation.rpc.single_process", "tracker", "--host",
                                "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            tracker_summary("127.0.0.1", port, timeout=0.5)
            break
        except TrackerUnreachable:
            if tracker.poll() is not None:
                sys.exit(f"the tracker exited with {tracker.returncode}")
            time.sleep(0.02)
    ready = time.perf_counter() - begin
    tracker.send_signal(signal.SIGTERM)
    tracker.wait(timeout=30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"ready_s": round(ready, 3),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for round_ in range(args.rounds):
        for name in VARIANTS if round_ % 2 == 0 else reversed(VARIANTS):
            runs[name].append(one_tracker(VARIANTS[name]))
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in ("ready_s", "cpu_s")}
               for name, rs in runs.items()}
    if args.json:
        print(json.dumps({"cpu": cpu_model(), "rounds": args.rounds, "runs": runs, "medians": medians}, indent=2))
        return
    print(f"{cpu_model()}, {args.rounds} rounds, medians:")
    for name, median in medians.items():
        print(f"  {name:13s} answering after {median['ready_s']:.2f} s, {median['cpu_s']:.2f} CPU-s")


if __name__ == "__main__":
    main()
