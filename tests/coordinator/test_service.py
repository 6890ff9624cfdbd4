"""The coordinator over real gRPC, with fake agents that speak the FarmAgent API but never tune.

Planning extracts mlp-tiny's tasks with TVM and the coordinator really builds the library;
the fake agents (support.fake_agent: the real agent's state machine with fake I/O) report
hand-made TuningRecords and validate with foundation.runtime.validation.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import math
import sqlite3
import threading
import time
from datetime import timedelta

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.fleet import ReportPolicy
from coordinator.server import SERVICE_NAMES, serve
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent
from support.polling import wait_for

TIMEOUT = 60.0  # per wait; the whole file stays well under two minutes


@pytest.fixture(scope="module")
def fingerprint():
    from foundation.hardware.fingerprint import local_fingerprint

    return local_fingerprint("llvm")


@pytest.fixture
def start(tmp_path, registry_url):
    """Start coordinators on loopback, on SQLite and on PostgreSQL; all stopped at teardown."""
    servers = []

    def started(**overrides):
        options = dict(
            listen="127.0.0.1:0", registry_url=registry_url,
            tracker="127.0.0.1:9190", heartbeat_interval=0.5, lease_ttl=30.0, tick_interval=0.1,
            data_dir=tmp_path / "coordinator",
        )
        server = serve(**(options | overrides))
        servers.append(server)
        channel = grpc.insecure_channel(server.address)
        return server, channel

    yield started
    for server in servers:
        server.stop(grace=1)


def _submit(channel, model="mlp-tiny", **kw):
    stub = farm_pb2_grpc.FarmClientStub(channel)
    # Plain weights: the tests name the plain tasks (prepacked ones are renamed by TVM's layout pass).
    request = farm_pb2.SubmitRequest(zoo_name=model, batch=1, target="llvm", validation_runs=3, seed=7,
                                     **({"trials_per_task": 4, "weights_layout": "plain"} | kw))
    return stub.Submit(request, timeout=60).jobs


def _wait_job(channel, job_id, *states, what=""):
    stub = farm_pb2_grpc.FarmClientStub(channel)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        job = stub.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=10)
        if job.state in states:
            return job
        if job.state in (farm_pb2.JOB_STATE_FAILED, farm_pb2.JOB_STATE_CANCELLED) and job.state not in states:
            pytest.fail(f"job {job_id} ended {farm_pb2.JobState.Name(job.state)}: {job.error}")
        time.sleep(0.1)
    pytest.fail(f"job {job_id} not {what or states} within {TIMEOUT} s: {job}")


def _wait_for(condition, what):
    return wait_for(condition, TIMEOUT, what, interval=0.1)


def test_two_agents_share_a_job_that_is_built_validated_and_committed(start, fingerprint):
    server, channel = start()
    agents = [FakeAgent(channel, fingerprint), FakeAgent(channel, fingerprint)]
    for agent in agents:
        reply = agent.register()
        assert reply.tracker.key == f"farm-{fingerprint.id}" and reply.tracker.port == 9190
        agent.keep_beating()

    # The first agent long-polls, as real agents do: its call is held while there is no work
    # and answered with a shard once the job is planned.
    held = agents[0].held_lease(max_wait=30, timeout=45)
    time.sleep(1.0)
    assert not held.done(), f"an idle long poll was answered with no work: {held.result()}"
    (first,) = _submit(channel)
    job_id = first.job.id
    assert not first.attached and first.job.state == farm_pb2.JOB_STATE_QUEUED
    (again,) = _submit(channel)
    assert again.attached and again.job.id == job_id

    shards = [agents[0].leased(held.result()), agents[1].lease()]
    job = _wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
    assert job.shards.leased == 2 and job.trials_budget == 8
    assert all(shards) and shards[0].shard_id != shards[1].shard_id
    assert {t.name for s in shards for t in s.tasks} == {"fused_matmul1_add1", "fused_matmul_add_relu"}
    assert shards[0].target == job.target and shards[0].tracker.key == f"farm-{fingerprint.id}"
    assert shards[0].budget.max_trials_per_task == 4 and shards[0].seed == 7
    # The job's trial plan: both tasks matter, each gets its cap, and each agent is told its task's plan.
    assert [t.max_trials for s in shards for t in s.tasks] == [4, 4]
    assert sorted((p.task, p.trials) for p in job.trial_plan) == [("fused_matmul1_add1", 4),
                                                                  ("fused_matmul_add_relu", 4)]
    assert agents[0].lease_out_of_turn() is None, "no third shard"

    for agent, shard in zip(agents, shards):
        reply = agent.report(shard)
        assert reply.accepted and reply.stored == 2 and reply.duplicates == 0, reply
        again = agent.report(shard)
        assert again.accepted and again.stored == 0 and again.duplicates == 2, "kept once"
    # Held from before the library exists: answered, with no shard, as soon as its validation
    # waits for an agent, so that the agent asks for it at once.
    held = agents[0].held_lease_out_of_turn(max_wait=30, timeout=45)
    for agent, shard in zip(agents, shards):
        assert agent.complete(shard).accepted
    reply = held.result()
    assert not reply.HasField("shard") and reply.retry_after.ToTimedelta().total_seconds() == 0, reply
    _wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING, what="built")
    outcome = _wait_for(agents[1].validate, "a validation lease")
    lease, reply = outcome
    assert reply.accepted and lease.reference_library and lease.library_sha256
    job = _wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)
    assert job.artifact.validated and job.artifact.latency.mean_ms > 0
    assert job.trials_done == 8 and job.trial_errors == 2 and job.shards.done == 2
    assert server.coordinator.store.records.count_records(fingerprint_id=fingerprint.id) == 4

    # The whole story, replayed from the start: states in order, progress, shard changes.
    client = farm_pb2_grpc.FarmClientStub(channel)
    # Event sequences are shared by all jobs; this job's first one (queued) is the registry's first.
    events = list(client.WatchJob(farm_pb2.WatchJobRequest(job_id=job_id, after_sequence=1), timeout=30))
    assert events[0].WhichOneof("event") == "snapshot"
    states = [e.state_changed.to_state for e in events if e.WhichOneof("event") == "state_changed"]
    assert states[-3:] == [farm_pb2.JOB_STATE_BUILDING, farm_pb2.JOB_STATE_VALIDATING, farm_pb2.JOB_STATE_SUCCEEDED]
    assert any(e.WhichOneof("event") == "task_progress" for e in events)

    (hit,) = _submit(channel)
    assert hit.job.cache_hit and hit.job.state == farm_pb2.JOB_STATE_SUCCEEDED and hit.job.id != job_id
    assert hit.job.artifact.id == job.artifact.id
    listed = client.ListAgents(farm_pb2.ListAgentsRequest(), timeout=10).agents
    assert {a.id for a in listed} == {a.agent_id for a in agents}
    for agent in agents:
        agent.close()


def test_a_validation_of_outputs_that_are_not_finite_fails_its_job(start, fingerprint):
    """An agent says a tuned library's error is infinite where its outputs are not finite
    (foundation.runtime.validation.compare_outputs). PostgreSQL's JSON holds no infinity: the
    registry refused the report ("the database server" was blamed) and the agent retried it
    while the job waited; the job fails, saying why."""
    server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    agent.keep_beating()
    (submitted,) = _submit(channel)
    shard = _wait_for(agent.lease, "the job's shard")
    assert agent.report(shard).accepted and agent.complete(shard).accepted
    _wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_VALIDATING, what="built")
    reason = "tuned output 0 contains NaN or Inf"
    outcome = farm_pb2.OutputCheck(passed=False, max_abs_err=math.inf, max_rel_err=math.inf, rtol=1e-3,
                                   atol=1e-4, reason=reason)
    _lease, reply = _wait_for(lambda: agent.validate(outcome), "a validation lease")
    assert reply.accepted, reply
    job = _wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_FAILED)
    assert reason in job.error and not job.HasField("artifact"), job
    agent.close()


@pytest.mark.parametrize("registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_watch_that_loses_the_registry_ends_saying_so(start, fingerprint, registry_url, postgres_admin):
    """A WatchJob stream polls the registry: lost mid-watch (before the tick notices, and after),
    the stream ends UNAVAILABLE saying the registry fails, as calls refused by the gate do, and
    the CLI says so (exit 4). It ended UNKNOWN ('Unexpected RegistryError'), which the CLI took
    for a bug in the coordinator (exit 70)."""
    from sqlalchemy.engine import make_url

    from farm.client import coordinator_error
    from foundation.wire import UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY

    from support.registry_db import cut_off, restore

    server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    (submitted,) = _submit(channel)
    # Planned first: the planner's TVM work is not left in flight when the server stops at teardown.
    _wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_RUNNING, what="planned")
    client = farm_pb2_grpc.FarmClientStub(channel)
    watch = client.WatchJob(farm_pb2.WatchJobRequest(job_id=submitted.job.id), timeout=60)
    assert next(watch).WhichOneof("event") == "snapshot"
    database = make_url(registry_url).database
    cut_off(postgres_admin, database)
    try:
        with pytest.raises(grpc.RpcError) as lost:
            for _event in watch:
                pass
        err = lost.value
        assert err.code() == grpc.StatusCode.UNAVAILABLE, err
        assert (UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY) in tuple(err.trailing_metadata()), err
        said = coordinator_error(err, server.address)
        assert said.exit_code == 4 and "is up, but its registry is failing" in said.problem, said
        # A watch begun while the registry is away is refused the same way.
        with pytest.raises(grpc.RpcError) as refused:
            next(client.WatchJob(farm_pb2.WatchJobRequest(job_id=submitted.job.id), timeout=10))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert (UNAVAILABLE_CAUSE_KEY, UNAVAILABLE_REGISTRY) in tuple(refused.value.trailing_metadata())
    finally:
        restore(postgres_admin, database)
    agent.close()


def test_a_held_lease_poll_ends_inside_its_deadline_and_when_the_coordinator_stops(start, fingerprint):
    server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    # Held for less than the caller's deadline: it hears "no work", never DEADLINE_EXCEEDED.
    reply = agent.held_lease(max_wait=30, timeout=3).result()
    assert not reply.HasField("shard") and reply.retry_after.ToTimedelta().total_seconds() == 1.0, reply
    # An agent told to stop does not wait for its held poll: the call is cancelled.
    from agent.coordinator_calls import answer_unless_stopped

    stop = threading.Event()
    held = agent.held_lease(max_wait=30, timeout=45)
    threading.Timer(0.3, stop.set).start()
    assert answer_unless_stopped(held, stop) is None and held.cancelled()
    # A draining coordinator answers its held polls within the grace rather than cutting them off.
    held = agent.held_lease(max_wait=30, timeout=45)
    time.sleep(0.5)
    assert not held.done(), "an idle long poll was answered with no work at once"
    server.stop(grace=10)
    reply = held.result()  # raises if the call was cut off (CANCELLED or UNAVAILABLE)
    assert not reply.HasField("shard"), reply


class _CallerDeadline:
    """The one thing `_hold_seconds` asks of a call's context: the time left before its deadline."""

    def __init__(self, remaining):
        self.remaining = remaining

    def time_remaining(self):
        return self.remaining


def test_held_polls_end_early_by_a_random_share_so_idle_agents_do_not_poll_in_step():
    from coordinator.servicer import LEASE_WAIT_MARGIN_S, LEASE_WAIT_SPREAD, MAX_LEASE_WAIT_S, _hold_seconds

    request = farm_pb2.LeaseShardRequest(agent_id="a")
    assert _hold_seconds(request, _CallerDeadline(None)) == 0.0, "no max_wait: answered at once"
    request.max_wait.FromTimedelta(timedelta(seconds=20))
    holds = [_hold_seconds(request, _CallerDeadline(None)) for _ in range(500)]
    assert all(20 * (1 - LEASE_WAIT_SPREAD) <= hold <= 20 for hold in holds), "never longer than asked"
    assert max(holds) - min(holds) > 20 * LEASE_WAIT_SPREAD / 2, "spread over the band"
    request.max_wait.FromTimedelta(timedelta(seconds=600))
    assert max(_hold_seconds(request, _CallerDeadline(None)) for _ in range(100)) <= MAX_LEASE_WAIT_S
    # Inside the caller's deadline whatever the draw, so that it hears "no work" in time.
    assert all(_hold_seconds(request, _CallerDeadline(5.0)) <= 5.0 - LEASE_WAIT_MARGIN_S for _ in range(100))


def test_waiting_job_binds_then_stale_attempts_and_cancel_are_refused(start, fingerprint, caplog):
    caplog.set_level(logging.INFO, logger="farm.coordinator")
    server, channel = start(lease_ttl=1.0)
    (submitted,) = _submit(channel)
    job_id = submitted.job.id
    assert submitted.job.state == farm_pb2.JOB_STATE_QUEUED
    assert "waiting for an agent with target kind llvm (none registered)" in submitted.job.status
    time.sleep(0.5)
    client = farm_pb2_grpc.FarmClientStub(channel)
    assert client.GetJob(farm_pb2.GetJobRequest(job_id=job_id)).state == farm_pb2.JOB_STATE_QUEUED

    agent = FakeAgent(channel, fingerprint)
    agent.register()
    agent.keep_beating()
    job = _wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
    assert job.fingerprint_id == fingerprint.id
    shard = agent.lease()
    assert shard.attempt == 1

    # Silence past the TTL: the lease is re-queued, and the old attempt is stale.
    agent.keep_beating(False)
    _wait_for(lambda: client.GetJob(farm_pb2.GetJobRequest(job_id=job_id)).shards.pending == 1, "re-queue")
    # The record says which agent went silent, as a field too (--log-format json's agent_id).
    [lost] = [r for r in caplog.records if "missed its heartbeat TTL" in r.getMessage()]
    assert lost.agent_id == agent.agent_id
    instructions = agent.heartbeat()
    assert [i.cancel_lease.lease.attempt for i in instructions] == [1]
    stale = agent.report(shard)
    assert not stale.accepted and "attempt 1" in stale.reason and "is over" in stale.reason
    assert not agent.complete_out_of_turn(shard).accepted
    agent.stop_tuning(shard)
    agent.keep_beating()
    # Asked until granted, as a real agent polls: the coordinator answers an idle agent from what
    # it knows of its fingerprint's work, which learns of the re-queued shard at its next look
    # (a busy CI box once asked before it had: None).
    retry = _wait_for(agent.lease, "the re-queued shard to be leased again")
    assert retry.shard_id == shard.shard_id and retry.attempt == 2
    assert agent.report(retry).accepted
    # Reports alone keep it alive past the TTL: an accepted report is a sign of life (busy
    # agents skip heartbeats that would say nothing new: agent.daemon.heartbeat_due).
    agent.keep_beating(False)
    silent_until = time.monotonic() + 2.5  # over twice the TTL without a heartbeat
    while time.monotonic() < silent_until:
        reply = agent.report(retry)
        assert reply.accepted, f"the agent was taken for lost while it reported: {reply.reason}"
        time.sleep(0.1)
    agent.keep_beating()

    cancelled = client.CancelJob(farm_pb2.CancelJobRequest(job_id=job_id, reason="test"), timeout=10)
    assert cancelled.state == farm_pb2.JOB_STATE_CANCELLED
    agent.keep_beating(False)
    reasons = [i.cancel_lease.reason for i in agent.heartbeat()]
    assert any("cancelled" in r for r in reasons), reasons
    assert not agent.report(retry).accepted
    agent.close()


def test_errors_health_and_an_owned_tracker(start, fingerprint):
    server, channel = start(tracker=None, tracker_listen="127.0.0.1:0")
    assert server.tracker is not None and server.tracker.running
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", *SERVICE_NAMES):
        reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

    client = farm_pb2_grpc.FarmClientStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        _submit(channel, model="no-such-net")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "known models" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        client.GetJob(farm_pb2.GetJobRequest(job_id="job-nope"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "job-nope" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(client.WatchJob(farm_pb2.WatchJobRequest(job_id="job-nope"), timeout=10))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        client.Submit(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm -mcpu=x"), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "JSON" in err.value.details()

    agent = FakeAgent(channel, fingerprint)
    with pytest.raises(grpc.RpcError) as err:
        FakeAgent(channel, fingerprint, tvm_version="0.1.0").register()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "apache-tvm==" in err.value.details()
    reply = agent.register()
    assert reply.tracker.port == server.tracker.port
    agent.pretend_registered_as("agent-unknown")
    assert agent.heartbeat()[0].WhichOneof("instruction") == "re_register"
    with pytest.raises(grpc.RpcError) as err:
        agent.lease()
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    tracker = server.tracker
    server.stop(grace=1)
    assert not tracker.running, "the coordinator stops the tracker it started"


def _agent_leasing_a_shard(start, fingerprint, **options):
    """A coordinator started with ``options``, a running job, and an agent holding its shard."""
    server, channel = start(**options)
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    (submitted,) = _submit(channel)
    _wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_RUNNING)
    return server, channel, agent, agent.lease()


@contextlib.contextmanager
def _ingestion_held(registry_url, shard_id):
    """Make the coordinator's report commits wait: hold the lock they need, in another connection."""
    if registry_url.startswith("sqlite:///"):
        connection = sqlite3.connect(registry_url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")  # the database's one write lock
        try:
            yield
        finally:
            connection.execute("ROLLBACK")
            connection.close()
        return
    from sqlalchemy import create_engine, text

    from foundation.registry.engine import parse_registry_url

    engine = create_engine(parse_registry_url(registry_url))
    try:
        with engine.connect() as connection, connection.begin():
            # A report locks its shard's row (coordinator.cluster_store.reports).
            connection.execute(text("SELECT id FROM shards WHERE id = :id FOR UPDATE"), {"id": shard_id})
            yield
    finally:
        engine.dispose()


def test_heartbeats_are_answered_while_more_reports_wait_than_the_server_has_threads(
        start, fingerprint, registry_url):
    # Reports and claims wait for their group's commit without holding one of the server's
    # threads (coordinator.servicer): with two threads and four reports stuck behind a lock,
    # a heartbeat (and, on PostgreSQL, a lease poll) is still answered. The synchronous
    # server answered neither until the lock was gone.
    server, channel, agent, shard = _agent_leasing_a_shard(start, fingerprint, max_workers=2)
    assert agent.heartbeat() == []
    ingest = server.coordinator.report_commits
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        with _ingestion_held(registry_url, shard.shard_id):
            reports = [pool.submit(agent.report, shard, (factor,)) for factor in (2, 3, 4, 5)]
            # The first group is in its transaction, stuck on the lock; the rest queue behind it.
            _wait_for(lambda: ingest.pending() == 4, "four reports waiting for their commit")
            assert agent.heartbeat() == []
            if not registry_url.startswith("sqlite"):  # a claim needs SQLite's one write lock
                assert agent.lease_out_of_turn() is None, "the job's one shard is this agent's already"
            assert not any(report.done() for report in reports)
        assert all(report.result(TIMEOUT).accepted for report in reports)
    assert server.coordinator.store.records.count_records() == 4 * len(shard.tasks)
    agent.close()


def test_report_sizes_go_out_with_the_lease_and_follow_the_fleets_rate(start, fingerprint):
    # coordinator.fleet.report_sizing: at least records_per_report a report, more when the fleet's
    # records would otherwise take more than report_rate reports a second; every answer
    # carries the sizes, so agents follow them while they tune.
    from coordinator.fleet.report_sizing import RECOMPUTE_EVERY_S

    # Without the spread each agent's size gets (the next test), so the rule is seen exactly.
    server, channel, agent, shard = _agent_leasing_a_shard(
        start, fingerprint, report_policy=ReportPolicy(min_records=3, report_rate=0.05, min_within_s=2.0, jitter=0.0))
    # Sized before any record came: the configured minimum and bound.
    assert shard.records_per_report == 3 and shard.report_within.ToTimedelta().total_seconds() == 2.0
    factors = (2, 3, 4, 5, 6, 7)
    began = time.monotonic()
    assert agent.report(shard, factors).accepted
    time.sleep(RECOMPUTE_EVERY_S + 0.1)
    second = agent.report(shard, factors)
    took = time.monotonic() - began
    # 2 x 6 records per task over the seconds between the reports (at least RECOMPUTE_EVERY_S),
    # for a fleet asked for one report every 20 s; and one reporting agent, so a bound of 20 s.
    reported = 2 * len(factors) * len(shard.tasks)
    assert second.accepted
    assert math.ceil(reported / took / 0.05) <= second.records_per_report <= math.ceil(
        reported / RECOMPUTE_EVERY_S / 0.05)
    assert second.report_within.ToTimedelta().total_seconds() == 1 / 0.05
    stale = agent.report(shard, factors, attempt=shard.attempt + 1)
    assert not stale.accepted and stale.records_per_report == 0, "a refused report says nothing more"
    agent.close()


def test_each_answer_carries_the_fleets_size_spread(start, fingerprint):
    # coordinator.fleet.report_sizing.offer: every answer tells its agent the fleet's size spread by
    # up to a quarter either way, and a time bound no longer than the fleet's, so that agents
    # measuring at one rate do not report in step.
    from coordinator.fleet.report_sizing import RECOMPUTE_EVERY_S

    server, channel, agent, shard = _agent_leasing_a_shard(
        start, fingerprint, report_policy=ReportPolicy(min_records=3, report_rate=0.05, min_within_s=2.0, jitter=0.25))
    sizing = server.coordinator.report_sizing
    assert 3 <= shard.records_per_report <= 4, "the minimum of 3, spread up but never down"
    assert 1.5 <= shard.report_within.ToTimedelta().total_seconds() <= 2.0
    factors = (2, 3, 4, 5, 6, 7)
    assert agent.report(shard, factors).accepted
    time.sleep(RECOMPUTE_EVERY_S + 0.1)
    told = []
    for _ in range(8):
        before = sizing.size()
        reply = agent.report(shard, factors)
        after = sizing.size()
        assert reply.accepted
        low, high = min(before.records, after.records), max(before.records, after.records)
        assert round(0.75 * low) <= reply.records_per_report <= round(1.25 * high), (reply, before, after)
        within = reply.report_within.ToTimedelta().total_seconds()
        assert 0.75 * min(before.within_s, after.within_s) <= within <= max(before.within_s, after.within_s)
        told.append(reply.records_per_report)
    assert min(before.records, after.records) > 40, "a fleet size large enough to spread"
    assert len(set(told)) > 1, f"every answer told the same size: {told}"
    agent.close()


def test_a_settled_heartbeat_needs_no_thread_of_the_server(start, fingerprint):
    # A heartbeat listing exactly what the registry says the agent holds is answered on the
    # server's event loop (coordinator.servicer); only one that must read the registry
    # waits for a thread. Every thread of the pool is taken here.
    server, channel, agent, shard = _agent_leasing_a_shard(start, fingerprint, max_workers=2)
    other = FakeAgent(channel, fingerprint)
    other.register()
    # Read from the registry: settled from now on, until some state changes (a registration would).
    assert agent.heartbeat() == []
    # A lease the other agent was never given: its beat must be read against the registry.
    other.pretend_leased(shard, attempt=shard.attempt + 1)
    release = threading.Event()
    taken = [server._pool.submit(release.wait, TIMEOUT) for _ in range(2)]
    try:
        unsettled = other.heartbeat_future(timeout=TIMEOUT)
        assert agent.heartbeat() == []
        assert not unsettled.done(), "a heartbeat that must read the registry waited for a thread"
    finally:
        release.set()
    assert [i.WhichOneof("instruction") for i in unsettled.result().instructions] == ["cancel_lease"]
    assert all(t.result(TIMEOUT) for t in taken)
    agent.close()
    other.close()


def test_a_restarted_coordinator_carries_on(start, fingerprint, tmp_path):
    server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    (submitted,) = _submit(channel)
    job_id = submitted.job.id
    _wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
    shard = agent.lease()
    assert agent.report(shard).accepted
    server.stop(grace=1)

    # Same registry, same data directory, new process state: the lease is still the agent's.
    _server, channel = start()
    agent.stub = farm_pb2_grpc.FarmAgentStub(channel)
    previous = agent.agent_id
    agent.register()
    assert agent.agent_id == previous
    agent.keep_beating()
    assert agent.report(shard, factors=(8,)).accepted
    assert agent.complete(shard).accepted
    _wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING)
    _wait_for(agent.validate, "a validation lease")
    job = _wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)
    assert job.trials_done == 6 and job.artifact.validated
    agent.close()


def test_concurrent_model_loads_do_not_corrupt_each_other(tmp_path):
    """Relax's BlockBuilder stack is process-wide; loads from several threads must not interleave
    (bench/coordinator_scale.py saw AssertionErrors when Submit and the planner loaded at once)."""
    from concurrent.futures import ThreadPoolExecutor

    from coordinator.model_cache import load_stored_model
    from foundation.registry.entities import Model

    def load(batch: int):
        model = Model(id=f"m{batch}", name="mlp-tiny", source="zoo", source_digest="zoo-v1:mlp-tiny",
                      batch=batch, inputs=[], weights=[], num_parameters=0, created_at=None)
        return load_stored_model(model, tmp_path).identity()

    with ThreadPoolExecutor(max_workers=6) as pool:
        identities = list(pool.map(load, [1, 2, 3, 4, 5, 6] * 2))
    assert len(set(identities)) == 6


def test_reused_tasks_are_not_sharded_and_the_job_says_what_it_reused(start, fingerprint):
    """Exact-workload reuse in the distributed farm (foundation/domain/reuse.py): the coordinator
    plans no shard for a skipped task, caps a top-up on the wire, and the job reports both."""
    from farm.client import job_json

    _server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    agent.keep_beating()

    def run_to_the_end(job_id, shard=None, reported=None):
        if shard is not None:
            assert agent.report(reported or shard).accepted and agent.complete(shard).accepted
        _wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING, what="built")
        _wait_for(agent.validate, "a validation lease")
        return _wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)

    (first,) = _submit(channel)  # nothing measured yet: every task is tuned
    shard = _wait_for(agent.lease, "a shard")
    assert {t.name for t in shard.tasks} == {"fused_matmul_add_relu", "fused_matmul1_add1"}
    assert [t.max_trials for t in shard.tasks] == [4, 4]  # each task's plan: the 8 trials split
    only_the_first = farm_pb2.Shard()
    only_the_first.CopyFrom(shard)
    del only_the_first.tasks[1:]  # the first job measures one of the two workloads
    job = run_to_the_end(first.job.id, shard, only_the_first)
    assert (job.reuse.mode, job.reuse.skipped, job.reuse.topped_up, job.reuse.trials) == ("auto", 0, 0, 8)

    # Told to top up, the measured task gets one batch (16 of the 32 per task), as its own cap.
    (topup,) = _submit(channel, retune=True, reuse="topup", trials_per_task=32)
    shard = _wait_for(agent.lease, "a shard with a top-up")
    assert [t.max_trials for t in shard.tasks] == [16, 32] and shard.budget.max_trials_per_task == 32
    job = _wait_job(channel, topup.job.id, farm_pb2.JOB_STATE_RUNNING)
    assert (job.reuse.topped_up, job.reuse.topup_trials, job.reuse.planned_trials, job.trials_budget) == (
        1, 16, 64, 48)
    assert job_json(job)["reuse"] | {"tasks": 2} == {
        "mode": "topup", "tasks": 2, "reused": 1, "skipped": 0, "topped_up": 1, "topup_trials": 16,
        "planned_trials": 64, "trials": 48, "trials_saved": 16}
    run_to_the_end(topup.job.id, shard)

    # Both workloads measured now: reused fully, the job has no shard and is built from them at once.
    (full,) = _submit(channel, retune=True, reuse="full")
    job = run_to_the_end(full.job.id)
    assert job.shards.done == 0 and job.trials_budget == 0 and job.trials_done == 0
    assert (job.reuse.mode, job.reuse.tasks, job.reuse.skipped, job.reuse.planned_trials, job.reuse.trials) == (
        "full", 2, 2, 8, 0)
    assert agent.lease_out_of_turn() is None

    with pytest.raises(grpc.RpcError) as refused:
        _submit(channel, reuse="sometimes")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "reuse" in refused.value.details()
    agent.close()


def test_a_cold_job_is_offered_no_cost_model_and_a_warm_one_names_the_stored_one(start, fingerprint, registry_url):
    """`farm submit --cold` through the coordinator: its shards carry neither the fingerprint's
    stored cost model nor seeds; a job without --cold is offered the model."""
    from foundation.hardware.versions import tvm_version
    from foundation.meta_schedule.warm.cost_models import KIND, model_bytes, new_model
    from foundation.registry import RegistryStore

    _server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()  # the fingerprint is in the registry from here on
    agent.keep_beating()
    store = RegistryStore(registry_url, create=False)
    try:
        stored = store.cost_models.save(fingerprint.id, tvm_version(), KIND, model_bytes(new_model()),
                                 last_record_id=0, samples=0, workloads=0)
    finally:
        store.dispose()

    stub = farm_pb2_grpc.FarmClientStub(channel)
    (cold,) = _submit(channel, cold=True)
    shard = _wait_for(agent.lease, "the cold job's shard")
    assert not shard.HasField("cost_model") and shard.max_seeds_per_task == 0, shard
    assert not any(t.seeds for t in shard.tasks)
    stub.CancelJob(farm_pb2.CancelJobRequest(job_id=cold.job.id), timeout=10)
    _wait_job(channel, cold.job.id, farm_pb2.JOB_STATE_CANCELLED)

    (warm,) = _submit(channel, retune=True)
    assert warm.job.id != cold.job.id
    shard = _wait_for(agent.lease_out_of_turn, "the warm job's shard")
    assert shard.cost_model.id == stored.id and shard.cost_model.sha256 == stored.sha256, shard.cost_model
    agent.close()
