"""The agent's report of its records answered with refusals by a real coordinator: a record whose
trace is another workload's is not stored, and the agent says so once and counts it, where it
said nothing (a report of the real agent's code, agent.shard_tuning.report_records; the lease is
taken by the fake agent, the real agent's state machine, since tuning to a bad record is what no
real tuner does)."""

from __future__ import annotations

import json
import logging
import threading
from types import SimpleNamespace

import pytest

from agent import metrics
from agent.daemon import AgentSettings
from agent.shard_tuning import report_records
from agent.state.events import ReportAccepted
from foundation.meta_schedule.database.shard_database import ReportBatching
from foundation.registry import RegistryStore
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent, record_json
from support.foreign_records import convolution_record
from support.polling import wait_for
from support.served_coordinator import served_coordinator


@pytest.fixture
def leased(tmp_path):
    """A served coordinator with a job of mlp-tiny, one of whose shards the fake agent leased; what the real
    agent's report_records takes of an agent: (server, shard, holder, what the holder was posted)."""
    from foundation.hardware.fingerprint import local_fingerprint

    with served_coordinator(tmp_path) as (server, channel):
        fingerprint = local_fingerprint("llvm")
        leaser = FakeAgent(channel, fingerprint)
        leaser.register()
        client = farm_pb2_grpc.FarmClientStub(channel)
        client.Submit(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm", trials_per_task=4,
                                             weights_layout="plain", reuse="off"), timeout=120)
        shard = wait_for(leaser.lease, 120, "a shard leased", interval=0.2)
        posted: list = []
        holder = SimpleNamespace(agent_id=leaser.agent_id, stub=leaser.stub, fingerprint=fingerprint,
                                 settings=AgentSettings(coordinator=server.address), explain_tls=None,
                                 post=posted.append)
        yield server, shard, holder, posted
        client.CancelJob(farm_pb2.CancelJobRequest(job_id=shard.job_id), timeout=30)


def test_the_agent_says_and_counts_the_records_its_coordinator_refused(leased, caplog):
    server, shard, holder, posted = leased
    task = shard.tasks[0]
    batch = [(task.workload_shash, json.dumps(convolution_record(shard.target, 1e-9)), "warm"),
             (task.workload_shash, json.dumps(convolution_record(shard.target, 1e-5)), "warm"),
             (task.workload_shash, record_json(task, shard.target, 4), "warm")]
    series = ("farm_reported_records_refused_total", {"fingerprint": holder.fingerprint.id})
    before = metrics.REGISTRY.get_sample_value(*series) or 0.0

    with caplog.at_level(logging.WARNING, logger="farm.agent"):
        report_records(holder, shard, batch, [], ReportBatching(), threading.Event())

    assert [type(e) for e in posted] == [ReportAccepted], posted
    said = [r.getMessage() for r in caplog.records if r.name == "farm.agent" and "refused" in r.getMessage()]
    assert len(said) == 1, said
    assert "refused 2 of the 3 record(s)" in said[0], said
    assert "does not replay on the workload" in said[0] or "below the" in said[0], said
    assert metrics.REGISTRY.get_sample_value(*series) == before + 2
    store = RegistryStore(server.coordinator.store.url)
    try:
        assert [r.run_secs for r in store.records.all_records()] == [[4e-5]]
    finally:
        store.dispose()


def test_each_reported_record_is_filed_under_the_timing_context_it_was_timed_in(leased):
    """The agent's report names each record's timing context; the coordinator files it there, and drops
    a record naming none it knows (auto is a choice, not a context a record was timed in)."""
    server, shard, holder, posted = leased
    task = shard.tasks[0]
    batch = [(task.workload_shash, record_json(task, shard.target, 4), "weights"),
             (task.workload_shash, record_json(task, shard.target, 5), "warm"),
             (task.workload_shash, record_json(task, shard.target, 6), "auto"),
             (task.workload_shash, record_json(task, shard.target, 7), "x" * 500)]
    report_records(holder, shard, batch, [], ReportBatching(), threading.Event())

    assert [type(e) for e in posted] == [ReportAccepted], posted
    store = RegistryStore(server.coordinator.store.url)
    try:
        stored = {tuple(r.run_secs): r.timing_context for r in store.records.all_records()}
        assert stored == {(1e-5 * 4,): "weights", (1e-5 * 5,): "warm"}
    finally:
        store.dispose()
    said = [e.payload.get("message", "") for e in server.coordinator.cluster.events.events_after(shard.job_id)]
    assert any("2 reported record(s) were not kept: timing context 'auto' is not one of" in m for m in said), said
