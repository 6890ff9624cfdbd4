"""Faults of the distributed farm with real processes: shards that keep failing, agents of several
fingerprints, a coordinator draining on SIGTERM, one killed while a model is built and validated,
and one killed between the rounds of a job tuned `--until` a goal."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time

import pytest

from farm.local_cluster import Cluster

from support.cluster_rows import registry_of
from support.job_records import measurements_by_job
from support.polling import wait_for

pytestmark = pytest.mark.slow

# As small as a job gets: mlp-tiny has two tasks, and one measured candidate each is a real tune.
TINY = ["mlp-tiny", "llvm", "2", "--trials", "2", "--trials-per-task", "1", "--runs", "3"]
FINAL = ("succeeded", "failed", "cancelled")
# Each scenario on one registry (CI's 20 minutes): the restarts, leases and jobs they exercise
# are the same SQL on both, and test_cluster.py runs the fleet's scenarios on PostgreSQL.
SQLITE_ONLY = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def leased_shards(cluster_store, job_id: str, attempt: int):
    """The job's shards if there is exactly one and it is leased under ``attempt``."""
    shards = cluster_store.plans.shards_of(job_id)
    return shards if [(s.state.value, s.attempt) for s in shards] == [("leased", attempt)] else None


def wait_final(cluster: Cluster, job_id: str, timeout: float) -> dict:
    def final():
        doc = cluster.job(job_id)
        return doc if doc["state"] in FINAL else None

    return wait_for(final, timeout, f"job {job_id} to end", interval=1.0)


def run_artifact(cluster: Cluster, model: list[str]) -> dict:
    """`farm run` on this box from the shared registry: sha256 check, load without compiling, time."""
    ran = subprocess.run([cluster.exe, "run", *model, "--registry", cluster.registry_url, "--runs", "3", "--json"],
                         env=cluster.env("runner"), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


# -- 1. a shard that loses every attempt fails its job, with one reason per attempt --------------


@POSTGRES_ONLY  # the fleet's registry; SQLite runs the other fault scenarios here
def test_shard_failing_max_attempts_fails_the_job_with_its_reasons(make_cluster):
    # Every attempt is lost to the heartbeat TTL: kept short, so that each costs seconds.
    cluster = make_cluster(lease_ttl=3.0, heartbeat=0.5, max_attempts=2)
    cluster.start_coordinator()
    job_id = json.loads(cluster.farm("submit", *TINY, "--no-wait", "--json").stdout)["job"]

    with registry_of(cluster.registry_url) as (store, cluster_store):
        holders = []
        for attempt in (1, 2):
            name = f"victim{attempt}"
            victim = cluster.start_agent(name)
            # One agent at a time: the job has one shard, and the agent leasing it is this one.
            (shard,) = wait_for(lambda: leased_shards(cluster_store, job_id, attempt), 120,
                                f"attempt {attempt} to be leased", interval=0.2)
            assert f"registered as {shard.agent_id}" in cluster.log(name)
            wait_for(lambda: f"tuning {shard.id} (attempt {attempt})" in cluster.log(name), 60,
                     f"{name} to start tuning", interval=0.2)
            holders.append(shard.agent_id)
            cluster.kill(victim, signal.SIGKILL)
            if attempt == 1:
                # One lost attempt re-queues the shard; the job carries on.
                (shard,) = wait_for(
                    lambda: [s for s in cluster_store.plans.shards_of(job_id) if s.state.value == "pending"],
                    30, "the lapsed lease to be re-queued", interval=0.2)
                assert [f.attempt for f in shard.failures] == [1]
                assert store.get_job(job_id).state == "running"

    done = wait_final(cluster, job_id, 60)
    assert done["state"] == "failed", done
    assert done["shards"]["failed"] == 1 and done["artifact"] is None
    (failed,) = done["failed_shards"]
    assert failed["shard"] == shard.id and failed["tasks"]
    assert [(a["attempt"], a["agent"]) for a in failed["attempts"]] == [(1, holders[0]), (2, holders[1])]
    for a in failed["attempts"]:
        assert f"agent {a['agent']} sent no heartbeat" in a["reason"], a
    # The job's error names the shard and why each attempt failed.
    assert shard.id in done["error"] and "2 attempts" in done["error"], done["error"]
    assert all(a["reason"] in done["error"] for a in failed["attempts"]), done["error"]


# -- 2. agents of two fingerprints: one job per fingerprint, or the one --fingerprint names ------


@SQLITE_ONLY  # two jobs tuned side by side on 2 cores: ~1 min
def test_one_job_per_fingerprint_and_fingerprint_picks_one(make_cluster):
    cluster = make_cluster()
    cluster.start_coordinator()
    cluster.start_agent("both_cores")
    # Pinned to one CPU: the cores it may use are part of the fingerprint, so this is another one.
    cluster.start_agent("one_core", affinity={0})
    agents = cluster.wait_agents(2)
    fingerprint_of = {a["id"]: a["fingerprint_id"] for a in agents}
    with registry_of(cluster.registry_url) as (store, _):
        cores = {fp: store.get_fingerprint(fp).details["cores"] for fp in set(fingerprint_of.values())}
    assert sorted(cores.values()) == [1, 2], cores
    one_core = next(fp for fp, n in cores.items() if n == 1)

    # Without --fingerprint: one job per fingerprint, each followed to its end.
    spread = json.loads(cluster.farm("submit", *TINY, "--json", "--timeout", "300").stdout)["jobs"]
    assert sorted(j["fingerprint"] for j in spread) == sorted(cores), spread
    assert all(j["state"] == "succeeded" and j["artifact"]["validation"]["passed"] for j in spread), spread
    assert len({j["artifact"]["id"] for j in spread}) == 2
    with registry_of(cluster.registry_url) as (store, cluster_store):
        for job in spread:
            # Tuned only by agents of its fingerprint, into an artifact of that fingerprint.
            holders = {s.agent_id for s in cluster_store.plans.shards_of(job["job"])}
            assert holders and {fingerprint_of[a] for a in holders} == {job["fingerprint"]}, (job, holders)
            artifact = store.get_artifact(job["artifact"]["id"])
            assert (artifact.fingerprint_id, artifact.job_id) == (job["fingerprint"], job["job"])

        # With --fingerprint: exactly one job, for that fingerprint. Both fingerprints have the
        # model by now (without it both would answer, as above): the flag picks which.
        before = {j.id for j in store.list_jobs(limit=50)}
        picked = json.loads(cluster.farm("submit", *TINY, "--fingerprint", one_core, "--json").stdout)
        assert "jobs" not in picked, picked
        tuned_for_one_core = next(j["artifact"]["id"] for j in spread if j["fingerprint"] == one_core)
        assert (picked["fingerprint"], picked["cache_hit"], picked["artifact"]["id"]) == \
            (one_core, True, tuned_for_one_core), picked
        assert [(j.id, j.fingerprint_id) for j in store.list_jobs(limit=50) if j.id not in before] == \
            [(picked["job"], one_core)]


# -- 3. health goes NOT_SERVING while the coordinator drains ------------------------------------


@SQLITE_ONLY  # draining does not touch the registry
def test_draining_coordinator_is_not_serving(make_cluster):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from foundation.wire import CHANNEL_OPTIONS, farm_pb2, farm_pb2_grpc

    grace = 6.0
    cluster = make_cluster(grace=grace)
    cluster.start_coordinator()
    job_id = json.loads(cluster.farm("submit", *TINY, "--no-wait", "--json").stdout)["job"]  # waits for an agent

    seen: queue.Queue = queue.Queue()  # (stream, when, message, or the status code it ended with)
    others: list = []  # what next_of() passed over

    def follow(name: str, stream) -> None:
        try:
            for message in stream:
                seen.put((name, time.monotonic(), message))
            seen.put((name, time.monotonic(), "end"))
        except grpc.RpcError as err:
            seen.put((name, time.monotonic(), err.code()))

    def next_of(name: str, timeout: float):
        # What came while another stream was awaited is taken first, in its order.
        for item in others:
            if item[0] == name:
                others.remove(item)
                return item[1:]
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = seen.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:  # what the coordinator was doing meanwhile tells why
                raise AssertionError(f"nothing on {name} for {timeout} s; passed over: {others}\n"
                                     f"{cluster.log('coordinator')}") from None
            if item[0] == name:
                return item[1:]
            others.append(item)

    channel = grpc.insecure_channel(cluster.address, options=CHANNEL_OPTIONS)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        # Two calls in flight: a health watch, and a job watch (what `farm submit` holds open).
        threading.Thread(target=follow, args=("health", health.Watch(health_pb2.HealthCheckRequest())),
                         daemon=True).start()
        watch = farm_pb2_grpc.FarmClientStub(channel).WatchJob(farm_pb2.WatchJobRequest(job_id=job_id))
        threading.Thread(target=follow, args=("watch", watch), daemon=True).start()
        assert next_of("health", 10)[1].status == health_pb2.HealthCheckResponse.SERVING
        # The first snapshot comes once the coordinator has planned the job, which on a busy CI
        # box took over 10 s (2026-11-28); what is tested is the drain below.
        assert next_of("watch", 60)[1].HasField("snapshot")

        cluster.coordinator.send_signal(signal.SIGTERM)
        term = time.monotonic()
        # Watchers are told while the drain runs ...
        at, status = next_of("health", grace)
        assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING, status
        assert at - term < grace / 2, at - term
        # ... and no new call is answered, on a new connection or on the open one: nothing
        # sees SERVING from a coordinator that is going away.
        with grpc.insecure_channel(cluster.address) as fresh:
            for stub in (health, health_pb2_grpc.HealthStub(fresh)):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        # The job watch is still in flight and the coordinator still runs: the drain waits for it ...
        time.sleep(max(0.0, grace / 2 - (time.monotonic() - term)))
        assert cluster.coordinator.poll() is None
        assert seen.empty() and not others, others
        # ... for the grace period, then ends it and stops cleanly.
        at, code = next_of("watch", grace + 10)
        assert code == grpc.StatusCode.UNAVAILABLE and at - term >= grace - 0.5, (code, at - term)
        assert cluster.coordinator.wait(timeout=20) == 0
        assert time.monotonic() - term < grace + 10
    finally:
        channel.close()


# -- 4. an agent stopped with its coordinator leaves within its grace -----------------------------


@SQLITE_ONLY  # no registry write is involved
def test_an_agent_stopped_with_its_coordinator_mid_tune_leaves_within_its_grace(make_cluster):
    # As when a host shuts down: the coordinator (with the tracker the agent measures through)
    # and the agent get SIGTERM together while a batch is in flight. TVM's runner would retry the
    # gone tracker for a minute per candidate; the agent waits its grace for the batch, then leaves.
    grace = 2.0
    cluster = make_cluster()
    cluster.start_coordinator()
    agent = cluster.start_agent("a1", grace=grace)
    cluster.wait_agents(1)
    job_id = json.loads(cluster.farm("submit", "mlp-tiny", "llvm", "3", "--trials", "400", "--no-wait",
                                     "--json").stdout)["job"]

    def leased():
        return any(a.get("running_leases") for a in cluster.agents_now())

    wait_for(leased, 120, f"the agent to lease a shard of {job_id}")
    time.sleep(3)  # into its first batch
    cluster.stop_coordinator()
    agent.send_signal(signal.SIGTERM)
    term = time.monotonic()
    assert agent.wait(timeout=grace + 20) == 0, cluster.log("a1")[-3000:]
    assert time.monotonic() - term < grace + 20
    assert f"did not end within {grace:g} s of the stop; leaving without it" in cluster.log("a1")


# -- 5. the coordinator killed while it builds and while an agent validates ---------------------


@SQLITE_ONLY  # a tune and three coordinator starts: ~1 min
def test_build_and_validation_survive_coordinator_kills(make_cluster):
    # A lease TTL longer than the outages below, as in a fleet where a coordinator restart takes
    # less than the TTL: the agent's validation lease must survive it (an expired lease would be
    # re-leased, which hides a lost report).
    cluster = make_cluster(lease_ttl=30.0)
    cluster.start_coordinator()
    cluster.start_agent("a1")
    cluster.wait_agents(1)
    # Many timed runs make the agent's validation last seconds (mlp-tiny runs in ~10 us), long
    # enough to kill the coordinator while it is leased.
    model = TINY[:3]
    submit = [*TINY[:-1], "50000"]
    job_id = json.loads(cluster.farm("submit", *submit, "--no-wait", "--json").stdout)["job"]

    with registry_of(cluster.registry_url) as (store, cluster_store):
        # Killed while it compiles the tuned library and the untuned reference.
        wait_for(lambda: store.get_job(job_id).state not in ("queued", "running"), 240,
                 "tuning to end", interval=0.02)
        cluster.stop_coordinator(signal.SIGKILL)
        assert store.get_job(job_id).state == "building", store.get_job(job_id)
        assert cluster_store.validations.get_validation(job_id) is None

        # The restarted coordinator builds again; killed once an agent validates the library.
        cluster.start_coordinator()
        leased = wait_for(lambda: (v := cluster_store.validations.get_validation(job_id)) and v.state == "leased" and v,
                          120, "the validation to be leased", interval=0.05)
        # Killed once the agent has the lease in hand: a kill between the lease's commit and its
        # answer would leave it to expire instead (the agent never heard of it), another scenario.
        wait_for(lambda: f"validating the library of {job_id}" in cluster.log("a1"), 60,
                 "the agent to start validating", interval=0.05)
        cluster.stop_coordinator(signal.SIGKILL)
        assert store.get_job(job_id).state == "validating"
        # Back only once the agent, done validating, found no coordinator to report to.
        wait_for(lambda: "report validation: coordinator unavailable" in cluster.log("a1"), 60,
                 "the agent to report its validation to the dead coordinator", interval=0.2)
        cluster.start_coordinator()

        done = wait_final(cluster, job_id, 120)
        assert done["state"] == "succeeded", (done, cluster.log("coordinator")[-3000:], cluster.log("a1")[-3000:])
        assert done["artifact"]["validation"]["passed"]
        # The result of the lease the restart interrupted was kept, not validated again.
        validation = cluster_store.validations.get_validation(job_id)
        assert (validation.attempt, validation.agent_id) == (leased.attempt, leased.agent_id), validation
        assert [j.id for j in store.list_jobs(limit=10)] == [job_id]  # no new submit, no second job

    assert run_artifact(cluster, model)["artifact"] == done["artifact"]["id"]


# -- 6. the coordinator killed between the rounds of a job tuned until a goal ----------------------


@SQLITE_ONLY  # the rounds live in the job's options, the same SQL on both
def test_rounds_survive_a_coordinator_kill_and_the_judged_round_is_kept(make_cluster):
    cluster = make_cluster(lease_ttl=30.0)
    cluster.start_coordinator()
    cluster.start_agent("a1")
    cluster.wait_agents(1)
    # An unreachable goal: three rounds of 4 trials unless patience ends it after two.
    job_id = json.loads(cluster.farm("submit", "mlp-tiny", "llvm", "2", "--trials", "12", "--round-trials", "4",
                                     "--until", "0.001ms", "--patience", "2", "--runs", "3", "--no-wait",
                                     "--json").stdout)["job"]

    with registry_of(cluster.registry_url) as (store, _):
        def judged():
            return (store.get_job(job_id).options.get("until") or {}).get("rounds")

        [first] = wait_for(judged, 240, "the first round to be judged", interval=0.05)
        cluster.stop_coordinator(signal.SIGKILL)  # while the second round is planned or tuned
        cluster.start_coordinator()

        done = wait_final(cluster, job_id, 300)
        assert done["state"] == "succeeded", (done, cluster.log("coordinator")[-3000:])
        assert done["artifact"]["validation"]["passed"]
        until = done["until"]
        rounds = until["rounds"]
        # The round judged before the kill is kept as it was, its trials planned per task too, not judged
        # or tuned again.
        assert rounds[0] == first, (rounds[0], first)
        assert until["stopped"] in ("patience", "budget") and len(rounds) == 3, until
        assert all(0 < r["trials"] <= 4 for r in rounds) and sum(r["trials"] for r in rounds) == done["trials"]
        assert measurements_by_job(store, job_id) == done["trials"]  # every trial committed
        assert [j.id for j in store.list_jobs(limit=10)] == [job_id]
