"""`farm submit --until` through a coordinator: agents tune each round's shards, the coordinator times the model.

The tests share one cluster (a coordinator and two agents on a SQLite registry): each submits a
job of its own, or is refused before a job is made, and none stops a process.
"""

from __future__ import annotations

import json

import pytest

from farm.local_cluster import Cluster
from foundation.domain.tuning_rounds import BLOCKS

from support.job_records import measurements_by_job
from support.shared_cluster import module_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_farm(tmp_path_factory) -> Cluster:
    root = tmp_path_factory.mktemp("until-cluster")
    with module_cluster(root, f"sqlite:///{root / 'registry' / 'registry.db'}", agents=("a1", "a2")) as cluster:
        yield cluster


def test_rounds_are_sharded_to_agents_judged_here_and_the_stop_is_stored(local_farm, tmp_path):
    from coordinator.cluster_store import ClusterStore
    from foundation.registry.store import RegistryStore

    # An unreachable goal: the rounds go on until patience or the budget ends them.
    done = json.loads(local_farm.farm("submit", "mlp-tiny", "llvm", "2", "--trials", "12", "--round-trials", "4",
                                      "--until", "0.001ms", "--patience", "1", "--runs", "3", "--json",
                                      "--timeout", "500", check=False).stdout)
    assert done["state"] == "succeeded", (done, local_farm.log("coordinator")[-3000:])
    assert done["artifact"]["validation"]["passed"]
    until = done["until"]
    assert until["goal"] == "0.001 ms" and until["stopped"] in ("patience", "budget"), until
    rounds = until["rounds"]
    assert 2 <= len(rounds) <= 3 if until["stopped"] == "patience" else len(rounds) == 3
    for round_ in rounds:
        timing = round_["timing"]
        assert timing["blocks"] == BLOCKS and timing["blocks_won"] is None and not timing["beats"]
        assert timing["upper_quartile_ms"] >= timing["median_ms"] > 0.001 and timing["goal_ms"] == 0.001
        assert 0 < round_["trials"] <= 4
    assert sum(r["trials"] for r in rounds) == done["trials"]
    assert until["summary"].startswith("not reached") and "not beating 0.001 ms" in until["summary"]

    # Each round was its own set of shards, all done, leased to the agents.
    store = RegistryStore(local_farm.registry_url)
    try:
        shards = ClusterStore(store).plans.shards_of(done["job"])
        assert len(shards) >= len(rounds) and all(s.state.value == "done" for s in shards)
        assert len({s.agent_id for s in shards}) == 2  # both agents tuned rounds of it
        assert measurements_by_job(store, done["job"]) == done["trials"]  # every trial committed
        options = store.get_job(done["job"]).options
        stored = options["until"]
        assert stored["stopped"] == until["stopped"] and len(stored["rounds"]) == len(rounds)
        # The coordinator's document carries what the job's notes hold: each round's plan, the plan's cap.
        assert until["planned"] == stored["planned"] and until["rounds"] == stored["rounds"]
        assert done["trial_plan"] == options["trial_plan"]
    finally:
        store.dispose()

    # `farm status` and `farm report` say which stop ended it.
    status = local_farm.farm("status", done["job"])
    assert "Until" in status.stdout and until["summary"][:40] in status.stdout
    report = json.loads(local_farm.farm("report", done["job"], "--registry", local_farm.registry_url, "--out",
                                        str(tmp_path / "report"), "--json").stdout)
    markdown = open(report["markdown"]).read()
    assert "| until | not reached" in markdown

    # onnxruntime as the goal, for a zoo model: exported, checked and timed on the coordinator's CPU.
    zoo = json.loads(local_farm.farm("submit", "mlp-tiny", "llvm", "1", "--trials", "8", "--round-trials", "4",
                                     "--until", "onnxruntime", "--runs", "3", "--json", "--timeout", "500",
                                     check=False).stdout)
    assert zoo["state"] == "succeeded", (zoo, local_farm.log("coordinator")[-3000:])
    assert zoo["until"]["goal"] == "onnxruntime" and zoo["until"]["goal_ms"] > 0
    # What the goal is: onnxruntime's timing and its check against TVM, as the embedded job says it.
    reference = zoo["until"]["reference_latency_ms"]
    assert reference["runs"] == 20 and reference["median"] == zoo["until"]["goal_ms"]
    assert zoo["until"]["reference_check"]["passed"] and zoo["until"]["reference_check"]["max_abs_err"] < 1e-3
    assert zoo["until"]["stopped"] in ("reached", "patience", "budget")
    last = zoo["until"]["rounds"][-1]["timing"]
    assert last["blocks_won"] is not None and (zoo["until"]["stopped"] == "reached") == last["beats"]


def test_until_for_a_gpu_through_a_coordinator_is_refused_in_one_line(local_farm):
    proc = local_farm.farm("submit", "mlp-tiny", "cuda", "1", "--until", "20ms", check=False)
    assert proc.returncode == 2, proc
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "times each round's model on the coordinator's CPU" in lines[0]
