"""Tuning throughput of the distributed farm with 1 and 2 real agents on the same job.

On one box both agents share its cores (builds and measurements compete), so this shows the
farm's own overhead and scaling mechanics, not what separate boxes would give. Each run uses
a fresh SQLite registry and the same job.

    .venv/bin/python bench/cluster_throughput.py [--model resnet-tiny] [--trials 96]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from farm.local_cluster import Cluster


def run(agents: int, model: str, trials: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = Cluster(root, f"sqlite:///{root / 'registry.db'}")
        try:
            cluster.start_coordinator()
            for i in range(agents):
                cluster.start_agent(f"agent{i}")
            cluster.wait_agents(agents)
            begin = time.monotonic()
            done = json.loads(cluster.farm("submit", model, "llvm", "1", "--trials", str(trials),
                                           "--runs", "3", "--json", timeout=3600).stdout)
            wall = time.monotonic() - begin
        finally:
            cluster.close()
    return {"agents": agents, "state": done["state"], "trials": done["trials"], "seconds": wall,
            "shards": done["shards"], "latency_ms": (done["artifact"] or {}).get("latency_ms")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-tiny")
    parser.add_argument("--trials", type=int, default=96)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(n, args.model, args.trials) for n in (1, 2)]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['agents']} agent(s): {r['state']}, {r['trials']} trials in {r['seconds']:.1f} s "
              f"(submit to validated artifact) = {r['trials'] / r['seconds']:.2f} trials/s; shards {r['shards']}")
    rates = [r['trials'] / r['seconds'] for r in results]
    print(f"2 agents / 1 agent throughput: {rates[1] / rates[0]:.2f}x")


if __name__ == "__main__":
    main()
