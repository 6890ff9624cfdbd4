"""The coordinator's answers under a fleet's load, over real gRPC with fake agents: held lease polls
end inside their deadlines and spread out, heartbeats are answered while reports wait for the
registry, and report sizes follow the fleet's rate and spread (the sizes go out with each answer).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import math
import sqlite3
import threading
import time
from datetime import timedelta

import grpc
import pytest

from coordinator.fleet import ReportPolicy
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.coordinator_service import TIMEOUT, submit_job, wait_job, wait_until
from support.fake_agent import FakeAgent


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


def test_a_call_still_running_when_the_coordinator_stops_is_cancelled_not_left_pending(
        start, fingerprint, registry_url, caplog):
    # A CancelJob stuck behind a lock on the job outlives the stop's grace: the caller hears an
    # error, and the handler's task has ended before the event loop closes. So has any other task
    # on the loop still waiting on a thread: left pending, a task is destroyed with the closed
    # loop later and prints "Task was destroyed but it is pending!" and a traceback (CI,
    # 2026-11-29, a CancelJob's).
    server, channel = start()
    (submitted,) = submit_job(channel)
    stub = farm_pb2_grpc.FarmClientStub(channel)
    released = threading.Event()
    try:
        with _row_held(registry_url, "jobs", submitted.job.id):
            call = stub.CancelJob.future(farm_pb2.CancelJobRequest(job_id=submitted.job.id), timeout=TIMEOUT)
            [handler] = wait_until(lambda: _tasks_named(server, "CancelJob"), "the CancelJob handler running")
            straggler = _task_waiting_on_a_thread(server, released)
            server.stop(grace=0)
            assert handler.done() and straggler.cancelled(), (handler, straggler)
            with pytest.raises(grpc.RpcError):
                call.result()
    finally:
        released.set()  # else the pool's thread holds the test process open at its exit
    server._pool.shutdown(wait=True)  # the threads, which ran on after the lock went
    del handler, straggler
    gc.collect()
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def _task_waiting_on_a_thread(server, released: threading.Event) -> asyncio.Task:
    """A task on ``server``'s event loop awaiting a call in its thread pool that returns once
    ``released`` is set."""

    async def started():
        loop = asyncio.get_running_loop()
        return asyncio.ensure_future(loop.run_in_executor(server._pool, released.wait))

    async def waiting(future):
        return await future

    async def create():
        return asyncio.create_task(waiting(await started()))

    return server._loop.run(create(), timeout=10)


def _tasks_named(server, rpc: str) -> list:
    """The tasks on ``server``'s event loop whose names mention ``rpc``."""

    async def named():
        return [task for task in asyncio.all_tasks() if rpc in task.get_name()]

    return server._loop.run(named(), timeout=10)


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


def _agent_leasing_a_shard(start, fingerprint, **options):
    """A coordinator started with ``options``, a running job, and an agent holding its shard."""
    server, channel = start(**options)
    agent = FakeAgent(channel, fingerprint)
    agent.register()
    (submitted,) = submit_job(channel)
    wait_job(channel, submitted.job.id, farm_pb2.JOB_STATE_RUNNING)
    return server, channel, agent, agent.lease()


@contextlib.contextmanager
def _row_held(registry_url, table: str, row_id: str):
    """Make writes of the row ``row_id`` of ``table`` wait: hold the lock they need, in another
    connection (on SQLite the database's one write lock)."""
    if registry_url.startswith("sqlite:///"):
        connection = sqlite3.connect(registry_url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
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
            connection.execute(text(f"SELECT id FROM {table} WHERE id = :id FOR UPDATE"), {"id": row_id})
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
        # A report locks its shard's row (coordinator.cluster_store.reports).
        with _row_held(registry_url, "shards", shard.shard_id):
            reports = [pool.submit(agent.report, shard, (factor,)) for factor in (2, 3, 4, 5)]
            # The first group is in its transaction, stuck on the lock; the rest queue behind it.
            wait_until(lambda: ingest.pending() == 4, "four reports waiting for their commit")
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
