"""Reports read and committed by the coordinator's ingest process, a real child process, on both backends."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import text

from coordinator.fleet.ingest_process import CHILD_LOGGER, IngestProcess
from coordinator.fleet.report_ingest import UnreadReport, read_report
from foundation.errors import RegistryError
from foundation.logs import LogFormat, LogLevel
from foundation.registry.session import Changes

from support.cluster_rows import GPU, TTL, agent_of, at, planned_job
from support.polling import wait_for

CPU_TARGET = '{"kind":"llvm"}'


def _record_json(factor: int) -> str:
    """A TuningRecord as agents send it: [trace, run_secs, target, args_info]."""
    trace = [[["SamplePerfectTile", [], [], [f"v{factor}"]]], [[0, [factor, 64 // factor]]]]
    return json.dumps([trace, [0.001 * factor], {"kind": "llvm"}, None])


def _report(lease, agent_id: str, factors, **changes) -> UnreadReport:
    workload_id = lease.tasks[0].workload_id
    fields = dict(
        shard_id=lease.shard.id, attempt=lease.attempt, agent_id=agent_id, job_id=lease.job.id,
        fingerprint_id=GPU, target=CPU_TARGET, tvm_version="0.27.0", software={"tvm": "0.27.0"},
        records=[(workload_id, _record_json(f), "warm") for f in factors], trials=len(factors),
    )
    return UnreadReport(**(fields | changes))


@pytest.fixture
def leased(cluster_store):
    """An agent holding the one shard of a planned job: (agent, lease)."""
    planned_job(cluster_store, tasks=1, shards=1)
    agent = agent_of(cluster_store)
    return agent, cluster_store.leases.claim_shard(agent.id, GPU, ["cuda"], at(1), TTL)


def test_unreadable_records_are_dropped_and_said_so_in_the_job_log():
    good = json.dumps([[[], []], [0.5], {"kind": "llvm"}, None])
    report = UnreadReport(
        "job-1.s0", 1, "agent-1", "job-1", GPU, CPU_TARGET, "0.27.0", {},
        records=[(7, good, "weights"), (7, "{not json", "warm"), (7, json.dumps({"a": 1}), "warm")], trials=4,
        dropped=["workload 99 is not one of job job-1's tasks"], events=[("task_progress", {"trials": 4})],
    )
    batch = read_report(report)
    [record] = batch.records
    assert (record.workload_id, record.target, record.run_secs, record.job_id) == (7, CPU_TARGET, [0.5], "job-1")
    assert record.timing_context == "weights"
    assert batch.trials == 4 and batch.events[0] == ("task_progress", {"trials": 4})
    kind, log = batch.events[1]
    assert kind == "log" and log["level"] == "warning" and log["source"] == "agent-1"
    assert log["message"].startswith("3 reported record(s) were not kept: workload 99")


def test_the_child_commits_groups_and_comes_back_after_being_killed(leased, cluster_store, store, registry_url):
    agent, lease = leased
    ingest = IngestProcess(registry_url)
    try:
        first = ingest.pid
        verdicts = ingest([_report(lease, agent.id, [1, 2]), _report(lease, agent.id, [2, 4]),
                           _report(lease, agent.id, [8], attempt=2)])
        assert [(v.accepted, v.stored, v.duplicates) for v in verdicts] == [(True, 2, 0), (True, 1, 1), (False, 0, 0)]
        assert "attempt 2" in verdicts[2].reason
        assert store.records.count_records() == 3 and cluster_store.plans.get_shard(lease.shard.id).trials_done == 4

        os.kill(first, signal.SIGKILL)
        wait_for(lambda: not _alive(first), 10, "the killed child to go")
        # Its answer thread sees the pipe close and starts another at once; a group sent
        # before that would be lost with the child (and said so: "send them again").
        wait_for(lambda: ingest.pid not in (None, first), 30, "a new child")
        [again] = ingest([_report(lease, agent.id, [16])])
        assert (again.accepted, again.stored) == (True, 1)
        assert ingest.pid != first and store.records.count_records() == 4
        last = ingest.pid
    finally:
        ingest.close()
    assert not _alive(last) and ingest.pid is None


def test_a_failed_group_is_raised_as_the_registry_said_and_the_child_goes_on(
        leased, cluster_store, store, registry_url):
    # The report committer then serves the group's reports one by one (coordinator.fleet.group_commit),
    # so one bad report fails alone: it needs the registry's own error, with its fix.
    agent, lease = leased
    ingest = IngestProcess(registry_url)
    try:
        child = ingest.pid
        bad = _report(lease, agent.id, [3], records=[(999_999, _record_json(3), "warm")])
        with pytest.raises(RegistryError) as caught:
            ingest([_report(lease, agent.id, [1]), bad])
        with pytest.raises(RegistryError) as here:  # the same group, committed in this process
            cluster_store.reports.ingest_reports([read_report(_report(lease, agent.id, [1])), read_report(bad)])
        assert "999999" in caught.value.problem
        assert (type(caught.value), caught.value.problem, caught.value.fix) == (
            type(here.value), here.value.problem, here.value.fix)
        [good] = ingest([_report(lease, agent.id, [1])])
        assert (good.accepted, good.stored) == (True, 1) and ingest.pid == child
        assert store.records.count_records() == 1
    finally:
        ingest.close()


@contextlib.contextmanager
def _lease_rows_held(store, lease):
    """Another writer holding what a report must lock: the shard's row (PostgreSQL) or the
    database (SQLite), until the block ends."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with store.unit_of_work.write(Changes.STATE) as session:
            if store.dialect == "postgresql":
                session.execute(text("SELECT id FROM shards WHERE id = :id FOR UPDATE"), {"id": lease.shard.id})
            else:
                session.execute(text("UPDATE shards SET trials_done = trials_done WHERE id = :id"),
                                {"id": lease.shard.id})
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        holder.join(10)


def test_groups_sent_while_one_commits_are_read_meanwhile_and_answered_in_order(
        leased, cluster_store, store, registry_url):
    # Groups go to the child as they come; it reads them while the one before commits, and
    # commits what it read together. Each group still gets its own verdicts, as if alone:
    # a record new to the registry counts as stored for the first report that had it.
    agent, lease = leased
    ingest = IngestProcess(registry_url)
    try:
        with _lease_rows_held(store, lease):
            first = ingest.submit([_report(lease, agent.id, [1, 2])])
            time.sleep(0.5)  # its transaction waits on the held rows
            later = [ingest.submit([_report(lease, agent.id, [2, 4])]),
                     ingest.submit([_report(lease, agent.id, [3], records=[(999_999, _record_json(3), "warm")])]),
                     ingest.submit([_report(lease, agent.id, [4, 8]), _report(lease, agent.id, [8], attempt=2)])]
            time.sleep(0.5)
            assert not any(f.done() for f in [first, *later])
        verdicts = [f.result(30) for f in [first, *later] if f is not later[1]]
        assert [[(v.accepted, v.stored, v.duplicates) for v in group] for group in verdicts] == [
            [(True, 2, 0)], [(True, 1, 1)], [(True, 1, 1), (False, 0, 0)]]
        with pytest.raises(RegistryError) as caught:  # the bad group fails alone, as the registry said
            later[1].result(30)
        assert "999999" in caught.value.problem
        assert store.records.count_records() == 4 and cluster_store.plans.get_shard(lease.shard.id).trials_done == 6
    finally:
        ingest.close()


def test_groups_read_meanwhile_commit_together(leased, cluster_store, store, registry_url):
    agent, lease = leased
    ingest = IngestProcess(registry_url)
    try:
        with _lease_rows_held(store, lease):
            first = ingest.submit([_report(lease, agent.id, [1])])
            time.sleep(0.5)
            later = [ingest.submit([_report(lease, agent.id, [f, 2 * f])]) for f in (2, 3, 4)]
            time.sleep(0.5)
        assert [[(v.accepted, v.stored, v.duplicates) for v in f.result(30)] for f in [first, *later]] == [
            [(True, 1, 0)], [(True, 2, 0)], [(True, 2, 0)], [(True, 1, 1)]]  # 4 came with [2, 4]
        assert store.records.count_records() == 6 and cluster_store.plans.get_shard(lease.shard.id).trials_done == 7
    finally:
        ingest.close()


def test_a_stuck_child_is_replaced_and_its_group_fails_with_a_reason(leased, cluster_store, store, registry_url):
    agent, lease = leased
    ingest = IngestProcess(registry_url, timeout=3)
    try:
        with _lease_rows_held(store, lease):
            stuck = ingest.pid
            with pytest.raises(RegistryError) as caught:
                ingest([_report(lease, agent.id, [1])])
            assert "restarted" in str(caught.value) and ingest.pid != stuck and not _alive(stuck)
        [verdict] = ingest([_report(lease, agent.id, [1])])
        assert (verdict.accepted, verdict.stored) == (True, 1)
    finally:
        ingest.close()


@pytest.mark.parametrize("log_format", [LogFormat.JSON, LogFormat.TEXT])
def test_the_child_logs_in_the_coordinators_format(store, registry_url, capfd, log_format):
    """The coordinator's stderr carries one format: a bug the child hits while it reads a group
    (a report that is not one) is a JSON line under --log-format json, the text layout else."""
    ingest = IngestProcess(registry_url, log=(log_format, LogLevel.INFO))
    try:
        with pytest.raises(RegistryError, match="reading a group of reports failed: AttributeError"):
            ingest([42])
    finally:
        ingest.close()
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    if log_format is LogFormat.JSON:
        [record] = [json.loads(line) for line in lines]
        assert (record["level"], record["logger"], record["message"]) == (
            "error", CHILD_LOGGER, "reading a group of reports failed")
        assert "AttributeError" in record["exception"]
    else:
        assert re.fullmatch(r"\S+ \S+ ERROR farm\.coordinator\.ingest: reading a group of reports failed", lines[0])
        assert lines[-1].startswith("AttributeError"), lines


def test_the_child_ends_when_the_coordinator_is_killed(registry_url):
    # SIGKILL leaves no chance to stop it: the child ends when its end of the pipe closes.
    script = ("import sys, time; from coordinator.fleet.ingest_process import IngestProcess; "
              "ingest = IngestProcess(sys.argv[1]); print(ingest.pid, flush=True); time.sleep(600)")
    owner = subprocess.Popen([sys.executable, "-c", script, registry_url], stdout=subprocess.PIPE, text=True)
    try:
        child = int(owner.stdout.readline())
        assert _alive(child)
        owner.kill()
        owner.wait(10)
        wait_for(lambda: not _alive(child), 30, "the orphaned ingest process to end")
    finally:
        owner.kill()
        owner.wait(10)


def test_the_ingest_process_never_imports_tvm():
    # Its point is to keep a core free; TVM's import alone costs seconds (tvm_startup).
    probe = ("import sys; from coordinator.fleet.ingest_process import _child_main; "
             "import coordinator.cluster_store, foundation.registry.store, coordinator.fleet.report_ingest; "
             "print(sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.')))")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert shown.stdout.strip() == "[]"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not serving: the coordinator reaps its child with join(), and may do so
    # between the signal and this read (then the file is gone, or goes between its open and
    # its read: ESRCH).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
