"""The distributed farm with real processes on loopback: coordinator, tracker, agents, faults."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from support.polling import wait_for

pytestmark = pytest.mark.slow

# Each scenario runs on one registry (the SQL is the same on both), so that the suite stays within
# CI's 20 minutes on this machine kind's slow hours too (22 min at 2026-11-23 17:00 when two ran
# on both). The fleet's scenarios run on PostgreSQL; SQLite, the single box's registry, runs the
# ONNX file here and, with real agents, the fault scenarios of test_cluster_faults.py (two agents
# tuning side by side, a coordinator killed mid-build); tests/test_coordinator_service.py runs
# two agents sharing a job, built, validated and committed, on both.
ON_POSTGRES = pytest.mark.parametrize(
    "registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
ON_SQLITE = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)

SUBMIT = ["submit", "mlp-tiny", "llvm", "2", "--trials", "24", "--trials-per-task", "12", "--runs", "3"]


def registry_records(url: str, job_id: str | None = None) -> set[int]:
    from foundation.registry.store import RegistryStore

    store = RegistryStore(url)
    try:
        return {r.id for r in store.records.all_records() if job_id is None or r.job_id == job_id}
    finally:
        store.dispose()


@ON_POSTGRES  # the fleet's registry
def test_two_agents_share_a_job(local_farm):
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.start_agent("a2")
    agents = local_farm.wait_agents(2)
    keys = {a["fingerprint_id"] for a in agents}
    assert len(keys) == 1  # one box: one fingerprint

    done = json.loads(local_farm.farm(*SUBMIT, "--json", "--timeout", "400").stdout)
    assert done["state"] == "succeeded", done
    assert done["artifact"] and done["artifact"]["validation"]["passed"]
    job_id = done["job"]

    # Both agents tuned a shard of it.
    from coordinator.cluster_store import ClusterStore
    from foundation.registry.store import RegistryStore

    store = RegistryStore(local_farm.registry_url)
    shards = ClusterStore(store).plans.shards_of(job_id)
    assert len(shards) == 2 and {s.agent_id for s in shards} == {a["id"] for a in agents}
    # Every record landed once: as many rows as trials, no duplicate digests possible.
    records = [r for r in store.records.all_records() if r.job_id == job_id]
    assert len(records) == done["trials"] >= 24
    # Each agent measured its tasks' plans, no more (the plan is the job's, stored with it).
    plan = {t["task"]: t["trials"] for t in store.get_job(job_id).options["trial_plan"]["tasks"]}
    assert sum(plan.values()) == done["trials_budget"] and sum(s.trials_budget for s in shards) == sum(plan.values())
    shash_of = {t.name: t.workload_shash for t in ClusterStore(store).plans.job_tasks(job_id)}
    workloads = {w: shash for w, (shash, _) in store.records.get_workloads({r.workload_id for r in records}).items()}
    for task, trials in plan.items():
        assert 0 < sum(1 for r in records if workloads[r.workload_id] == shash_of[task]) <= trials, (task, plan)
    store.dispose()

    # Each agent's workers' zygote is a fork of the agent (made before its gRPC channel started
    # gRPC's threads), not a new Python that imports TVM again; so are its RPC server and the
    # server's guard, forked by the zygote.
    new_pythons = {"foundation.meta_schedule.forked_workers", "tvm.exec.popen_worker",
                   "foundation.rpc.single_process", "foundation.processes.group_guard"}
    for name in ("a1", "a2"):
        agent = psutil.Process(local_farm.agents[name].pid)
        assert [c for c in agent.children() if c.cmdline() == agent.cmdline()], name
        assert not [p.cmdline() for p in agent.children(recursive=True) if new_pythons & set(p.cmdline())]

    # TVM's own tracker query lists the agents' RPC servers under the fingerprint key.
    query = subprocess.run([sys.executable, "-m", "tvm.exec.query_rpc_tracker", "--host", "127.0.0.1",
                            "--port", str(local_farm.tracker_port)], capture_output=True, text=True, timeout=60)
    fingerprint = keys.pop()
    assert fingerprint in query.stdout, query.stdout

    # The artifact runs on this box from the shared registry, and a resubmit is a hit.
    ran = subprocess.run([local_farm.exe, "run", "mlp-tiny", "llvm", "2", "--registry", local_farm.registry_url,
                          "--runs", "3", "--json"], env=local_farm.env("runner"), capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["artifact"] == done["artifact"]["id"]
    hit = json.loads(local_farm.farm(*SUBMIT, "--json").stdout)
    assert hit["cache_hit"] is True and hit["artifact"]["id"] == done["artifact"]["id"]


@ON_POSTGRES  # many writers, one of them gone
def test_killed_agent_loses_no_reported_records(local_farm):
    local_farm.start_coordinator()
    victim = local_farm.start_agent("victim")
    local_farm.wait_agents(1)
    submitted = json.loads(local_farm.farm(*SUBMIT, "--no-wait", "--json").stdout)
    job_id = submitted["job"]
    before = wait_for(lambda: registry_records(local_farm.registry_url, job_id), 240, "first reported records")
    local_farm.kill(victim, signal.SIGKILL)
    local_farm.start_agent("rescuer")
    done = local_farm.job(job_id)
    deadline = time.monotonic() + 400
    while done["state"] not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        time.sleep(2)
        done = local_farm.job(job_id)
    assert done["state"] == "succeeded", done
    after = registry_records(local_farm.registry_url, job_id)
    assert before <= after, "records reported before the kill were lost"


@ON_POSTGRES  # the fleet's registry
def test_coordinator_restart_mid_job(local_farm):
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)
    submitted = json.loads(local_farm.farm(*SUBMIT, "--no-wait", "--json").stdout)
    job_id = submitted["job"]
    wait_for(lambda: registry_records(local_farm.registry_url, job_id), 240, "tuning to start")
    local_farm.stop_coordinator(signal.SIGKILL)  # its tracker dies with it (process-group guard)
    local_farm.start_coordinator()  # a new, empty tracker on the same port
    # The agent was not restarted: it re-registers and its RPC server is listed again in time.
    local_farm.wait_agents(1, timeout=60)
    done = local_farm.job(job_id)
    deadline = time.monotonic() + 400
    while done["state"] not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
        time.sleep(2)
        done = local_farm.job(job_id)
    assert done["state"] == "succeeded", (done, local_farm.log("coordinator")[-3000:])


@ON_POSTGRES
def test_cancel_releases_leases(local_farm):
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)
    big = ["submit", "mlp-tiny", "llvm", "3", "--trials", "400", "--no-wait", "--json"]
    job_id = json.loads(local_farm.farm(*big).stdout)["job"]
    wait_for(lambda: registry_records(local_farm.registry_url, job_id), 240, "tuning to start")
    cancelled = json.loads(local_farm.farm("cancel", job_id, "--json").stdout)
    assert cancelled["state"] == "cancelled"
    # The agent stops promptly: its record count stops growing and it holds no lease.
    def idle():
        return all(not a.get("running_leases") for a in local_farm.agents_now())

    wait_for(idle, 60, "the agent to drop the cancelled lease")
    settled = registry_records(local_farm.registry_url, job_id)
    time.sleep(5)
    assert registry_records(local_farm.registry_url, job_id) == settled


@ON_SQLITE  # a single box's registry
def test_onnx_file_through_the_coordinator(local_farm, tmp_path):
    """An ONNX file travels as bytes (content-addressed), is tuned by an agent, runs locally."""
    from support.onnx_models import write_small_cnn

    path = write_small_cnn(tmp_path / "small_cnn.onnx")
    local_farm.start_coordinator()
    local_farm.start_agent("a1")
    local_farm.wait_agents(1)
    done = json.loads(local_farm.farm("submit", str(path), "llvm", "2", "--trials", "8", "--trials-per-task", "4",
                                   "--runs", "3", "--json", "--timeout", "300").stdout)
    assert done["state"] == "succeeded", done
    assert done["model"] == "small_cnn" and done["batch"] == 2 and done["artifact"]["validation"]["passed"]
    ran = subprocess.run([local_farm.exe, "run", str(path), "llvm", "2", "--registry", local_farm.registry_url,
                          "--runs", "2", "--json"], env=local_farm.env("runner"), capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["artifact"] == done["artifact"]["id"]
