"""The coordinator over real gRPC, with fake agents that speak the FarmAgent API but never tune.

Planning extracts mlp-tiny's tasks with TVM and the coordinator really builds the library;
the fake agents (support.fake_agent: the real agent's state machine with fake I/O) report
hand-made TuningRecords and validate with foundation.runtime.validation.
"""

from __future__ import annotations

import logging
import math
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.server import SERVICE_NAMES
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.coordinator_service import submit_job, wait_job, wait_until
from support.fake_agent import FakeAgent


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
    (first,) = submit_job(channel)
    job_id = first.job.id
    assert not first.attached and first.job.state == farm_pb2.JOB_STATE_QUEUED
    (again,) = submit_job(channel)
    assert again.attached and again.job.id == job_id

    shards = [agents[0].leased(held.result()), agents[1].lease()]
    job = wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
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
    wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING, what="built")
    outcome = wait_until(agents[1].validate, "a validation lease")
    lease, reply = outcome
    assert reply.accepted and lease.reference_library and lease.library_sha256
    job = wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)
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

    (hit,) = submit_job(channel)
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
    (submitted,) = submit_job(channel)
    shard = wait_until(agent.lease, "the job's shard")
    assert agent.report(shard).accepted and agent.complete(shard).accepted
    wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_VALIDATING, what="built")
    reason = "tuned output 0 contains NaN or Inf"
    outcome = farm_pb2.OutputCheck(passed=False, max_abs_err=math.inf, max_rel_err=math.inf, rtol=1e-3,
                                   atol=1e-4, reason=reason)
    _lease, reply = wait_until(lambda: agent.validate(outcome), "a validation lease")
    assert reply.accepted, reply
    job = wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_FAILED)
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
    (submitted,) = submit_job(channel)
    # Planned first: the planner's TVM work is not left in flight when the server stops at teardown.
    wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_RUNNING, what="planned")
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


def test_waiting_job_binds_then_stale_attempts_and_cancel_are_refused(start, fingerprint, caplog):
    caplog.set_level(logging.INFO, logger="farm.coordinator")
    server, channel = start(lease_ttl=1.0)
    (submitted,) = submit_job(channel)
    job_id = submitted.job.id
    assert submitted.job.state == farm_pb2.JOB_STATE_QUEUED
    assert "waiting for an agent with target kind llvm (none registered)" in submitted.job.status
    time.sleep(0.5)
    client = farm_pb2_grpc.FarmClientStub(channel)
    assert client.GetJob(farm_pb2.GetJobRequest(job_id=job_id)).state == farm_pb2.JOB_STATE_QUEUED

    agent = FakeAgent(channel, fingerprint)
    agent.register()
    agent.keep_beating()
    job = wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
    assert job.fingerprint_id == fingerprint.id
    shard = agent.lease()
    assert shard.attempt == 1

    # Silence past the TTL: the lease is re-queued, and the old attempt is stale.
    agent.keep_beating(False)
    wait_until(lambda: client.GetJob(farm_pb2.GetJobRequest(job_id=job_id)).shards.pending == 1, "re-queue")
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
    retry = wait_until(agent.lease, "the re-queued shard to be leased again")
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


def test_a_shard_requeued_after_a_lost_agent_measures_only_what_is_left_of_its_budget(start, fingerprint):
    """The next attempt was sent the whole budget again: 80 trials measured of 64."""
    server, channel = start(lease_ttl=1.0)
    lost, heir = FakeAgent(channel, fingerprint), FakeAgent(channel, fingerprint)
    lost.register()
    lost.keep_beating()
    (submitted,) = submit_job(channel)
    wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_RUNNING)
    shard = lost.lease()
    assert lost.report(shard, factors=(2,)).accepted  # one record of each task
    lost.keep_beating(False)  # silent past the TTL: its lease is re-queued
    heir.register()
    heir.keep_beating()
    retry = wait_until(heir.lease, "the re-queued shard to be leased again")
    assert retry.shard_id == shard.shard_id and retry.attempt == 2
    assert retry.budget.max_trials_global == shard.budget.max_trials_global - len(shard.tasks)
    assert retry.budget.max_trials_per_task <= retry.budget.max_trials_global
    assert sum(t.max_trials for t in retry.tasks) <= retry.budget.max_trials_global  # each task's cut to fit
    # The heir measures what it was sent: the job ends its tuning at its budget, not past it.
    (planned,) = {t.max_trials for t in retry.tasks}
    assert heir.report(retry, factors=tuple(2 ** (i + 1) for i in range(planned))).accepted
    job = farm_pb2_grpc.FarmClientStub(channel).GetJob(farm_pb2.GetJobRequest(job_id=submitted.job.id), timeout=10)
    assert job.trials_done == job.trials_budget == shard.budget.max_trials_global, (job.trials_done, job.trials_budget)
    lost.close()
    heir.close()


def test_errors_health_and_an_owned_tracker(start, fingerprint):
    server, channel = start(tracker=None, tracker_listen="127.0.0.1:0")
    assert server.tracker is not None and server.tracker.running
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", *SERVICE_NAMES):
        reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

    client = farm_pb2_grpc.FarmClientStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        submit_job(channel, model="no-such-net")
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


def test_a_restarted_coordinator_carries_on(start, fingerprint, tmp_path):
    server, channel = start()
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    (submitted,) = submit_job(channel)
    job_id = submitted.job.id
    wait_job(channel, job_id, farm_pb2.JOB_STATE_RUNNING)
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
    wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING)
    wait_until(agent.validate, "a validation lease")
    job = wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)
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
        wait_job(channel, job_id, farm_pb2.JOB_STATE_VALIDATING, what="built")
        wait_until(agent.validate, "a validation lease")
        return wait_job(channel, job_id, farm_pb2.JOB_STATE_SUCCEEDED)

    (first,) = submit_job(channel)  # nothing measured yet: every task is tuned
    shard = wait_until(agent.lease, "a shard")
    assert {t.name for t in shard.tasks} == {"fused_matmul_add_relu", "fused_matmul1_add1"}
    assert [t.max_trials for t in shard.tasks] == [4, 4]  # each task's plan: the 8 trials split
    only_the_first = farm_pb2.Shard()
    only_the_first.CopyFrom(shard)
    del only_the_first.tasks[1:]  # the first job measures one of the two workloads
    job = run_to_the_end(first.job.id, shard, only_the_first)
    assert (job.reuse.mode, job.reuse.skipped, job.reuse.topped_up, job.reuse.trials) == ("auto", 0, 0, 8)

    # Told to top up, the measured task gets one batch (16 of the 32 per task), as its own cap.
    (topup,) = submit_job(channel, retune=True, reuse="topup", trials_per_task=32)
    shard = wait_until(agent.lease, "a shard with a top-up")
    assert [t.max_trials for t in shard.tasks] == [16, 32] and shard.budget.max_trials_per_task == 32
    job = wait_job(channel, topup.job.id, farm_pb2.JOB_STATE_RUNNING)
    assert (job.reuse.topped_up, job.reuse.topup_trials, job.reuse.planned_trials, job.trials_budget) == (
        1, 16, 64, 48)
    assert job_json(job)["reuse"] | {"tasks": 2} == {
        "mode": "topup", "tasks": 2, "reused": 1, "skipped": 0, "topped_up": 1, "topup_trials": 16,
        "planned_trials": 64, "trials": 48, "trials_saved": 16}
    run_to_the_end(topup.job.id, shard)

    # Both workloads measured now: reused fully, the job has no shard and is built from them at once.
    (full,) = submit_job(channel, retune=True, reuse="full")
    job = run_to_the_end(full.job.id)
    assert job.shards.done == 0 and job.trials_budget == 0 and job.trials_done == 0
    assert (job.reuse.mode, job.reuse.tasks, job.reuse.skipped, job.reuse.planned_trials, job.reuse.trials) == (
        "full", 2, 2, 8, 0)
    assert agent.lease_out_of_turn() is None

    with pytest.raises(grpc.RpcError) as refused:
        submit_job(channel, reuse="sometimes")
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
    (cold,) = submit_job(channel, cold=True)
    shard = wait_until(agent.lease, "the cold job's shard")
    assert not shard.HasField("cost_model") and shard.max_seeds_per_task == 0, shard
    assert not any(t.seeds for t in shard.tasks)
    stub.CancelJob(farm_pb2.CancelJobRequest(job_id=cold.job.id), timeout=10)
    wait_job(channel, cold.job.id, farm_pb2.JOB_STATE_CANCELLED)

    (warm,) = submit_job(channel, retune=True)
    assert warm.job.id != cold.job.id
    shard = wait_until(agent.lease_out_of_turn, "the warm job's shard")
    assert shard.cost_model.id == stored.id and shard.cost_model.sha256 == stored.sha256, shard.cost_model
    agent.close()
