"""What an agent costs until it serves: a `farm agent` started against a running coordinator, timed
until the coordinator's tracker lists its RPC server, then stopped; in rotating rounds of the
variants: the default (its workers' zygote forked from the agent, and the RPC server forked from the
zygote), `FARM_FORK_ZYGOTE=0` (no zygote until the first shard; the RPC server a new Python that
imports TVM) and, with --against, another checkout's `farm` (its default).

CPU is that of the agent and of every process under it, from start to exit: this process is a
child subreaper, so that the processes a stopped group leaves orphaned (an RPC server whose guard
was killed first) are reaped, and counted, here. Prints each variant's medians and the ratios to
the first; the figures go in docs/benchmarks.md ("The agent's RPC server forked from its zygote").

    .venv/bin/python bench/agent_startup.py [--rounds 5] [--against OTHER/.venv/bin/farm] [--json]

Run it on a quiet box.
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
import tempfile
import time
from pathlib import Path

from _subreaper import become_subreaper, reap_orphans
from timing import cpu_model

from foundation.rpc.tracker import TrackerUnreachable, tracker_summary

FARM = str(Path(sys.executable).with_name("farm"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listed_servers(tracker_port: int) -> int:
    try:
        return len(tracker_summary("127.0.0.1", tracker_port, timeout=1.0).servers)
    except TrackerUnreachable:
        return 0


def one_agent(variant: tuple[str, dict[str, str]], coordinator: str, tracker_port: int, home: str) -> dict:
    farm, switches = variant
    env = {name: value for name, value in os.environ.items() if name != "FARM_FORK_ZYGOTE"}
    env.update(switches, FARM_HOME=home)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    agent = subprocess.Popen([farm, "agent", "--coordinator", coordinator, "--build-workers", "1"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while listed_servers(tracker_port) == 0:
        if agent.poll() is not None or time.perf_counter() - begin > 120:
            agent.kill()
            sys.exit(f"the agent did not serve: {agent.stderr.read()[-2000:]}")
        time.sleep(0.05)
    serving = time.perf_counter() - begin
    agent.send_signal(signal.SIGTERM)
    agent.communicate(timeout=60)
    while listed_servers(tracker_port):  # the next agent starts from an empty list
        time.sleep(0.1)
    time.sleep(0.5)  # orphans of a group killed with SIGKILL are gone by now
    reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"serving_s": round(serving, 3), "cpu_s": round(cpu, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="another checkout's farm executable, run as a third variant")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    variants = {"forked": (FARM, {}), "new-python": (FARM, {"FARM_FORK_ZYGOTE": "0"})}
    if args.against:
        variants["against"] = (args.against, {})
    become_subreaper()
    with tempfile.TemporaryDirectory(prefix="farm-bench-agent-") as home:
        listen, tracker_port = f"127.0.0.1:{free_port()}", free_port()
        coordinator = subprocess.Popen(
            [FARM, "coordinator", "--listen", listen, "--tracker-listen", f"127.0.0.1:{tracker_port}",
             "--registry", f"sqlite:///{home}/registry.db"], env=dict(os.environ, FARM_HOME=home),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    tracker_summary("127.0.0.1", tracker_port, timeout=1.0)
                    break
                except TrackerUnreachable:
                    time.sleep(0.2)
            runs: dict[str, list[dict]] = {name: [] for name in variants}
            for variant in variants.values():  # the page cache warmed for each
                one_agent(variant, listen, tracker_port, home)
            for round_ in range(args.rounds):
                names = list(variants)
                order = names[round_ % len(names):] + names[:round_ % len(names)]
                for name in order:
                    runs[name].append(one_agent(variants[name], listen, tracker_port, home))
                    if not args.json:
                        print(f"round {round_ + 1} {name:10s} serving after {runs[name][-1]['serving_s']:.2f} s, "
                              f"{runs[name][-1]['cpu_s']:.2f} CPU-s", flush=True)
        finally:
            coordinator.send_signal(signal.SIGTERM)
            coordinator.wait(timeout=60)
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in ("serving_s", "cpu_s")}
               for name, rs in runs.items()}
    ratios = {name: {key: round(medians[name][key] / medians["forked"][key], 2) for key in ("serving_s", "cpu_s")}
              for name in variants if name != "forked"}
    result = {"cpu": cpu_model(), "rounds": args.rounds, "variants": {n: [f, e] for n, (f, e) in variants.items()},
              "runs": runs, "medians": medians, "ratios_to_forked": ratios}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"\n{result['cpu']}, {args.rounds} rounds, medians:")
    for name, median in medians.items():
        print(f"  {name:10s} serving after {median['serving_s']:.2f} s, {median['cpu_s']:.2f} CPU-s")
    for name, ratio in ratios.items():
        print(f"  {name} / forked: {ratio['serving_s']:.2f}x the time to serve, {ratio['cpu_s']:.2f}x the CPU")


if __name__ == "__main__":
    main()
