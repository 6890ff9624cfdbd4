"""Records a token holder reports are checked before they are kept, and a record stored before the
checks never fails a job: a trace of another workload timed at 1 ns, filed under a model's task,
failed every later plan of that model (coordinator and embedded alike) and no command removed it."""

from __future__ import annotations

import json

import pytest

import farm
from coordinator.cluster_store import ClusterStore
from foundation.domain.jobs import JobState
from foundation.registry import RegistryStore
from foundation.registry.reported_records import new_record_from
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent, record_json
from support.foreign_records import convolution_record, file_foreign_records
from support.polling import wait_for
from support.served_coordinator import served_coordinator


@pytest.fixture(scope="module")
def fingerprint():
    from foundation.hardware.fingerprint import local_fingerprint

    return local_fingerprint("llvm")


@pytest.fixture
def coordinator(tmp_path):
    with served_coordinator(tmp_path) as served:
        yield served


def _submit(client, **fields):
    request = {"zoo_name": "mlp-tiny", "batch": 1, "target": "llvm", "trials_per_task": 4,
               "weights_layout": "plain"} | fields
    (submitted,) = client.Submit(farm_pb2.SubmitRequest(**request), timeout=120).jobs
    return submitted.job.id


def _planned(client, job_id):
    def planned():
        job = client.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=30)
        return (job.trials_budget > 0 or job.state == farm_pb2.JOB_STATE_FAILED) and job
    return wait_for(planned, 120, f"job {job_id} planned", interval=0.1)


def _leased_shard(server, channel, fingerprint):
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    client = farm_pb2_grpc.FarmClientStub(channel)
    job_id = _submit(client, reuse="off")
    shard = wait_for(agent.lease, 120, "a shard leased", interval=0.2)
    assert shard.job_id == job_id
    return agent, client, shard


def test_a_record_that_does_not_fit_its_task_is_refused_and_the_rest_kept(coordinator, fingerprint):
    server, channel = coordinator
    agent, client, shard = _leased_shard(server, channel, fingerprint)
    foreign = json.dumps(convolution_record(shard.target, 1e-5))  # a plausible time: the trace gives it away
    instant = json.loads(record_json(shard.tasks[0], shard.target, 2))
    instant[1] = [1e-9]  # a real trace of the task, timed faster than any call of a kernel
    good = record_json(shard.tasks[0], shard.target, 4)
    records = [farm_pb2.MeasuredRecord(task_name=t.name, workload_shash=t.workload_shash, tuning_record_json=foreign)
               for t in shard.tasks]
    records += [farm_pb2.MeasuredRecord(task_name=shard.tasks[0].name, workload_shash=shard.tasks[0].workload_shash,
                                        tuning_record_json=r) for r in (json.dumps(instant), good)]
    reply = agent.stub.ReportRecords(farm_pb2.ReportRecordsRequest(
        agent_id=agent.agent_id, shard_id=shard.shard_id, attempt=shard.attempt, records=records), timeout=60)
    assert reply.accepted and reply.stored == 1, reply
    assert reply.refused == len(shard.tasks) + 1, reply
    assert "its trace does not replay on the workload" in reply.refused_reason, reply.refused_reason

    store = RegistryStore(server.coordinator.store.url)
    try:
        kept = store.records.all_records()
        assert [r.run_secs for r in kept] == [[4e-5]], kept
        log = [e.payload.get("message", "") for e in ClusterStore(store).events.events_after(shard.job_id, limit=1000)]
        assert any(f"{len(shard.tasks) + 1} reported record(s) were not kept" in m for m in log), log
    finally:
        store.dispose()
    client.CancelJob(farm_pb2.CancelJobRequest(job_id=shard.job_id), timeout=30)


def test_a_stored_record_that_does_not_replay_fails_no_plan(coordinator, fingerprint):
    """Records filed before reports were checked: left out where they are read, the next best used."""
    from foundation.hardware.versions import tvm_version

    server, channel = coordinator
    agent, client, shard = _leased_shard(server, channel, fingerprint)
    agent.report(shard)  # real records of every task, so the poisoned one is not the only one
    store = RegistryStore(server.coordinator.store.url)
    try:
        poison = convolution_record(shard.target, 1e-9)
        for task in shard.tasks:
            ((workload_id, _),) = store.records.find_workloads(task.workload_shash)
            store.records.add_tuning_records([new_record_from(
                poison, workload_id=workload_id, fingerprint_id=fingerprint.id, target_json=shard.target,
                tvm_version=tvm_version())])
    finally:
        store.dispose()
    client.CancelJob(farm_pb2.CancelJobRequest(job_id=shard.job_id), timeout=30)
    for fields in ({"reuse": "auto"}, {"retune": True}):
        job = _planned(client, _submit(client, **fields))
        assert job.state != farm_pb2.JOB_STATE_FAILED, job.error
        client.CancelJob(farm_pb2.CancelJobRequest(job_id=job.id), timeout=30)


@pytest.mark.slow
def test_an_embedded_submit_leaves_out_a_stored_record_that_does_not_replay(tmp_path):
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    first = farm.submit("mlp-tiny", "llvm", 1, trials=4, trials_per_task=2, runs=2, registry=registry,
                        build_workers=1)
    assert first.succeeded, first
    assert file_foreign_records(registry)
    again = farm.submit("mlp-tiny", "llvm", 1, trials=4, trials_per_task=2, runs=2, registry=registry,
                        build_workers=1, retune=True)
    assert again.state is JobState.SUCCEEDED, again


def _refused_so_far(fingerprint_id: str) -> float:
    from coordinator import metrics

    return metrics.REGISTRY.get_sample_value("farm_records_refused_total", {"fingerprint": fingerprint_id}) or 0.0


def _run_to_success(agent, client, job_id):
    """Carry the job to its end as an agent would: its shards reported (real records of each task)
    and completed, its library validated; the job as it ended."""
    def ended():
        job = client.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=30)
        if job.state in (farm_pb2.JOB_STATE_SUCCEEDED, farm_pb2.JOB_STATE_FAILED, farm_pb2.JOB_STATE_CANCELLED):
            return job
        if job.state == farm_pb2.JOB_STATE_VALIDATING:
            agent.validate()
        elif job.state == farm_pb2.JOB_STATE_RUNNING and (shard := agent.lease()) is not None:
            agent.report(shard)
            agent.complete(shard)
        return None
    return wait_for(ended, 240, f"job {job_id} ended", interval=0.2)


def test_a_token_holders_foreign_records_are_refused_and_stored_ones_fail_no_job(coordinator, fingerprint, caplog):
    """The issue's case over real gRPC: a registered agent leases its own submit's shard and reports,
    for each task, a convolution's trace timed at 1 ns. Every one is refused and counted, none stored.
    A registry that holds such records anyway (written into it directly) still plans, builds,
    validates and stores the model, the records left out with a warning naming them."""
    server, channel = coordinator
    agent, client, shard = _leased_shard(server, channel, fingerprint)
    agent.keep_beating()
    before = _refused_so_far(fingerprint.id)
    poison = json.dumps(convolution_record(shard.target, 1e-9))
    reply = agent.stub.ReportRecords(farm_pb2.ReportRecordsRequest(
        agent_id=agent.agent_id, shard_id=shard.shard_id, attempt=shard.attempt,
        records=[farm_pb2.MeasuredRecord(task_name=t.name, workload_shash=t.workload_shash, tuning_record_json=poison)
                 for t in shard.tasks]), timeout=60)
    assert reply.accepted and reply.stored == 0 and reply.refused == len(shard.tasks), reply
    assert reply.refused_reason.startswith("record of workload "), reply.refused_reason
    assert _refused_so_far(fingerprint.id) - before == len(shard.tasks)
    assert server.coordinator.store.records.count_records() == 0

    # The agent goes on honestly: the job succeeds on its real records.
    agent.report(shard)
    agent.complete(shard)
    first = _run_to_success(agent, client, shard.job_id)
    assert first.state == farm_pb2.JOB_STATE_SUCCEEDED, first.error

    poisoned = file_foreign_records(server.coordinator.store.url)
    assert len(poisoned) == len(shard.tasks)
    caplog.set_level("WARNING")
    again = _run_to_success(agent, client, _submit(client, retune=True))
    assert again.state == farm_pb2.JOB_STATE_SUCCEEDED, again.error
    assert again.artifact.validated and again.artifact.id != first.artifact.id
    left_out = [r.getMessage() for r in caplog.records if "is left out" in r.getMessage()]
    assert left_out and all(f"--fingerprint {fingerprint.id}" in m for m in left_out), left_out
    assert {int(m.split()[2]) for m in left_out} <= set(poisoned), left_out
    agent.close()
