"""The farm's tuning rate with 1, 2, 4 and 8 CPU agents pinned to disjoint cores: one coordinator, the same job.

For a box with many cores (bench/gpu_run.sh runs it on the GPU box's CPUs). Each count gets a
fresh SQLite registry and coordinator, agents pinned with taskset to CORES_PER_AGENT cores of
their own (so every agent has the same fingerprint and they share one job), and the same job
(MODEL llvm BATCH with a budget none of them finishes). The rate is the agents' measured
candidates (their farm_trials_total, scraped from each agent's /metrics: counted as each batch is
measured, not when reported) in a window that opens at the first one, between the first and the
last change seen in it, so start-up, task extraction and the final build are left out. The
coordinator and this script keep the first cores.

    taskset -c 0,1 python bench/agent_scaling.py [--agents 1,2,4,8] [--seconds 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from farm.local_cluster import Cluster


def measure(agents: int, cores: list[list[int]], model: str, batch: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="farm-scaling-") as tmp:
        root = Path(tmp)
        cluster = Cluster(root, f"sqlite:///{root / 'registry.db'}", metrics=True)
        try:
            cluster.start_coordinator()
            for index in range(agents):
                cluster.start_agent(f"agent{index}", affinity=set(cores[index]))
            cluster.wait_agents(agents)
            job = json.loads(cluster.farm("submit", model, "llvm", str(batch), "--trials", "100000",
                                          "--cold", "--no-wait", "--json").stdout)["job"]
            changes = _trial_counts(cluster, seconds)
            cluster.farm("cancel", job, check=False)
        finally:
            stray = cluster.close()
    (begin, first), (end, last) = changes[0], changes[-1]
    window = end - begin
    return {"agents": agents, "cores_per_agent": len(cores[0]), "model": model, "batch": batch,
            "trials": last - first, "seconds": round(window, 1), "counts_seen": len(changes),
            "trials_per_s": round((last - first) / window, 2) if window > 0 else None, "stray_processes": stray}


def _trials(cluster: Cluster) -> int:
    """Candidates the agents measured so far (every outcome), from their Prometheus endpoints."""
    total = 0.0
    for name in cluster.agents:
        url = f"http://127.0.0.1:{cluster.metrics_ports[name]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            families = text_string_to_metric_families(reply.read().decode())
            total += sum(sample.value for family in families for sample in family.samples
                         if sample.name == "farm_trials_total")
    return int(total)


def _trial_counts(cluster: Cluster, seconds: float, first_timeout: float = 300,
                  min_changes: int = 3) -> list[tuple[float, int]]:
    """(time, trials) at each change of the count, from the first measured candidate for ``seconds``,
    or up to three times that until the count changed ``min_changes`` times: agents count a batch of
    candidates (16) at a time, so a slow agent needs a longer window for a rate."""
    deadline = time.monotonic() + first_timeout
    while (trials := _trials(cluster)) == 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"error: the agents measured nothing within {first_timeout:.0f} s (see their logs)")
        time.sleep(0.5)
    changes = [(time.monotonic(), trials)]
    begin = changes[0][0]
    while time.monotonic() < begin + seconds or (len(changes) <= min_changes
                                                 and time.monotonic() < begin + 3 * seconds):
        time.sleep(0.5)
        trials = _trials(cluster)
        if trials != changes[-1][1]:
            changes.append((time.monotonic(), trials))
    return changes


def core_sets(counts: list[int], cores_per_agent: int, reserved: int) -> list[list[int]]:
    """Disjoint core lists for the largest count, after the ``reserved`` first cores."""
    usable = sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))[reserved:]
    needed = max(counts) * cores_per_agent
    if len(usable) < needed:
        raise SystemExit(f"error: {max(counts)} agents of {cores_per_agent} core(s) need {needed} cores after the "
                         f"first {reserved}, this box has {len(usable)} (give fewer --agents or --cores-per-agent)")
    return [usable[i * cores_per_agent:(i + 1) * cores_per_agent] for i in range(max(counts))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="1,2,4,8", help="agent counts, comma-separated")
    parser.add_argument("--cores-per-agent", type=int, default=1)
    parser.add_argument("--reserved", type=int, default=2, help="first cores left to the coordinator and clients")
    parser.add_argument("--model", default="bert-tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=30.0, help="the measured window per count")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    counts = [int(n) for n in args.agents.split(",")]
    cores = core_sets(counts, args.cores_per_agent, args.reserved)
    results = []
    for count in counts:
        result = measure(count, cores, args.model, args.batch, args.seconds)
        results.append(result)
        rate = (f"{result['trials_per_s']} trials/s" if result["trials_per_s"] is not None
                else "no rate: the count changed once in the window (give more --seconds)")
        print(f"{count} agent(s) x {result['cores_per_agent']} core(s): {result['trials']} trials in "
              f"{result['seconds']} s = {rate}", flush=True)
        if args.out:  # after each count: a run cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    if results[0]["trials_per_s"]:
        base = results[0]["trials_per_s"] / results[0]["agents"]
        for result in results[1:]:
            if result["trials_per_s"]:
                print(f"{result['agents']} agents: {result['trials_per_s'] / (base * result['agents']):.2f} of linear")


if __name__ == "__main__":
    sys.exit(main())
