"""The coordinator's own outages with real processes: killed and restarted mid-shard (no attempt
spent), stopped while it builds (a clean exit, not SIGABRT), and left without its PostgreSQL
database (NOT_SERVING, one-line UNAVAILABLE answers, back when the database is; a lost schema
stops it)."""

from __future__ import annotations

import json
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from foundation.wire import CHANNEL_OPTIONS, UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY, farm_pb2, farm_pb2_grpc

from support.cluster_rows import registry_of
from support.polling import wait_for
from support.registry_db import cut_off, restore

pytestmark = pytest.mark.slow

SQLITE_ONLY = pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
# What a C++ runtime prints when a thread dies with an exception at exit (SIGABRT follows).
CRASH_MARKS = ("terminate called", "FATAL:", "Aborted", "core dumped")


@SQLITE_ONLY  # the leases are the same SQL on both
def test_a_coordinator_restart_mid_shard_costs_no_attempt_and_its_stop_while_it_builds_is_clean(make_cluster):
    ttl = 6.0
    cluster = make_cluster(lease_ttl=ttl, heartbeat=0.5)
    cluster.start_coordinator()
    cluster.start_agent("a1")
    cluster.wait_agents(1)
    job_id = json.loads(cluster.farm("submit", "mlp-tiny", "llvm", "2", "--trials", "16", "--trials-per-task", "8",
                                     "--runs", "3", "--no-wait", "--json").stdout)["job"]

    with registry_of(cluster.registry_url) as (store, cluster_store):
        def leased():
            shards = cluster_store.plans.shards_of(job_id)
            return shards if [(s.state.value, s.attempt) for s in shards] == [("leased", 1)] else None

        (shard,) = wait_for(leased, 120, "the shard to be leased", interval=0.2)
        wait_for(lambda: f"tuning {shard.id} (attempt 1)" in cluster.log("a1"), 60, "a1 to start tuning",
                 interval=0.2)
        cluster.stop_coordinator(signal.SIGKILL)
        # Down for longer than the lease TTL: every beat the agent sent meanwhile was lost, and
        # its last one heard is older than the TTL when the coordinator comes back.
        time.sleep(2 * ttl)
        cluster.start_coordinator()
        # A whole TTL after the restart, the lease stands (had the outage counted, it would
        # have lapsed at the first tick), or the agent already completed it under it.
        time.sleep(ttl + 2)
        (now,) = cluster_store.plans.shards_of(job_id)
        assert (now.state.value, now.attempt, now.agent_id) in (("leased", 1, shard.agent_id),
                                                                ("done", 1, shard.agent_id)), \
            (now.failures, cluster.log("coordinator")[-3000:], cluster.log("a1")[-3000:])

        # Stopped while it compiles the tuned model on its builder thread (native code the stop
        # does not wait for, as after a finished job it trains the cost model): a clean exit 0,
        # not SIGABRT from the interpreter's teardown.
        wait_for(lambda: store.get_job(job_id).state != "running", 240, "tuning to end", interval=0.02)
        cluster.coordinator.send_signal(signal.SIGTERM)
        assert cluster.coordinator.wait(timeout=30) == 0, cluster.log("coordinator")[-3000:]
        log = cluster.log("coordinator")
        assert "coordinator stopped" in log
        assert not [mark for mark in CRASH_MARKS if mark in log], log[-3000:]

        (final,) = cluster_store.plans.shards_of(job_id)
        # The same attempt, by the same agent, finished the shard: the restart cost nothing.
        assert (final.state.value, final.attempt, final.agent_id, list(final.failures)) == \
            ("done", 1, shard.agent_id, []), final
    assert cluster.log("a1").count("registered as ") == cluster.log("a1").count(f"registered as {shard.agent_id}")


# -- a coordinator without its database ----------------------------------------------------------


def database_of(url: str) -> str:
    return make_url(url).database


def health_status(address: str) -> int | None:
    with grpc.insecure_channel(address) as channel:
        try:
            return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2).status
        except grpc.RpcError:
            return None


@POSTGRES_ONLY  # a database server that goes away and comes back
def test_a_coordinator_without_its_database_is_not_serving_says_why_and_comes_back(make_cluster, postgres_admin):
    cluster = make_cluster()
    cluster.start_coordinator()
    database = database_of(cluster.registry_url)
    assert cluster.farm("jobs", "--json").returncode == 0

    cut_off(postgres_admin, database)
    try:
        wait_for(lambda: health_status(cluster.address) == health_pb2.HealthCheckResponse.NOT_SERVING, 20,
                 "the coordinator to say NOT_SERVING")
        # Every call ends UNAVAILABLE at once, with the registry's error in one line, marked as
        # the registry's (not a coordinator that cannot be reached).
        with grpc.insecure_channel(cluster.address, options=CHANNEL_OPTIONS) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                farm_pb2_grpc.FarmClientStub(channel).ListJobs(farm_pb2.ListJobsRequest(), timeout=5)
            err = refused.value
            assert err.code() == grpc.StatusCode.UNAVAILABLE
            assert "\n" not in err.details() and "registry is failing" in err.details(), err.details()
            assert database in err.details() and "not currently accepting connections" in err.details()
            assert (UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY) in tuple(err.trailing_metadata())
            with pytest.raises(grpc.RpcError) as agent_refused:
                farm_pb2_grpc.FarmAgentStub(channel).Heartbeat(farm_pb2.HeartbeatRequest(agent_id="agent-x"),
                                                               timeout=5)
            assert agent_refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # The CLI says the registry fails, not that the coordinator is out of reach.
        jobs = cluster.farm("jobs", check=False)
        assert jobs.returncode == 4, jobs
        (line,) = [line for line in jobs.stderr.splitlines() if line.strip()]
        expected = f"error: the coordinator at {cluster.address} is up, but its registry is failing: "
        assert line.startswith(expected), line
        assert "cannot reach the coordinator" not in line
        time.sleep(3)  # a few ticks more, each failing
    finally:
        restore(postgres_admin, database)

    wait_for(lambda: health_status(cluster.address) == health_pb2.HealthCheckResponse.SERVING, 20,
             "the coordinator to serve again")
    assert cluster.farm("jobs", "--json").returncode == 0
    log = cluster.log("coordinator")
    # The first failure and the return, one line each: no traceback per tick or call.
    assert "Traceback" not in log, log[-3000:]
    assert log.count("registry failing: ") == 1 and log.count("registry answers again after") == 1, log[-3000:]

    # A database that answers without the farm's schema will not come back by waiting: the
    # coordinator stops, saying why in one line, with exit code 4.
    owner = create_engine(make_url(cluster.registry_url).set(drivername="postgresql+psycopg"),
                          isolation_level="AUTOCOMMIT")
    try:
        with owner.connect() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
    finally:
        owner.dispose()
    assert cluster.coordinator.wait(timeout=30) == 4, cluster.log("coordinator")[-3000:]
    last = cluster.log("coordinator").strip().splitlines()[-1]
    assert last.startswith("error: the registry at ") and "lost its schema while the coordinator ran" in last, last
    assert "Traceback" not in cluster.log("coordinator")
