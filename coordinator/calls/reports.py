"""The coordinator's calls on records reported under shard leases: checked here, committed in groups.

A report is checked against its job from memory where it can be (`prepare_cached_report`, on
the server's event loop), its records against the job's tasks in the thread pool (`checked`,
coordinator.calls.record_checks), queued for the next group commit with its records still as text
(coordinator.fleet.report_ingest), and answered once its group is committed.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace

from coordinator import metrics
from coordinator.calls.record_checks import ReportedRecordCheck
from coordinator.cluster_store import ClusterStore
from coordinator.fleet import GroupCommit, KnownAgent, LiveAgents, ProgressEvents, ReportSizing, UnreadReport
from coordinator.hints import TaskProgress
from foundation.clock import utc_now
from foundation.domain.shard_split import job_of_shard
from foundation.domain.timing_context import RECORD_CONTEXTS
from foundation.errors import NotFound
from foundation.registry.entities import RecordReport
from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")

# Jobs whose reporting facts are kept before the memory is cleared and refilled on demand.
_MAX_REMEMBERED_JOBS = 1_000

# A report's records as an agent sent them: (workload shash, TuningRecord JSON, timing context).
ReportedRecords = Sequence[tuple[str, str, str]]


@dataclass(frozen=True)
class PreparedReport:
    """A report checked against its job, waiting for its group commit."""

    job_id: str
    report: UnreadReport
    progress: list[dict]
    refused: tuple[str, ...] = ()  # why each of its refused records was (coordinator.calls.record_checks)


@dataclass(frozen=True)
class _ReportingJob:
    id: str
    fingerprint_id: str
    target: str
    workloads: dict[str, int]  # task workload shash -> registry workload id
    flops: dict[int, float]  # registry workload id -> its task's FLOPs


class ReportCalls:
    """ReportRecords (over FarmAgent): a stale attempt keeps nothing, every reported candidate
    counts as a trial (failures are data), and an accepted report counts as a heartbeat."""

    def __init__(self, store: RegistryStore, cluster: ClusterStore, live: LiveAgents,
                 reports: GroupCommit[UnreadReport, RecordReport], progress_events: ProgressEvents,
                 progress: TaskProgress, report_sizing: ReportSizing, *, tvm_version: str):
        self._store = store
        self._cluster = cluster
        self._live = live
        self._reports = reports
        self._progress_events = progress_events
        self._progress = progress
        self._report_sizing = report_sizing
        self._tvm_version = tvm_version
        self._lock = threading.Lock()
        self._reporting_jobs: dict[str, _ReportingJob] = {}  # filled on demand
        self._record_check = ReportedRecordCheck(store)

    def report_records(self, agent_id: str, shard_id: str, attempt: int,
                       records: ReportedRecords, progress: Sequence[dict]) -> RecordReport:
        """Keep a batch of (workload shash, TuningRecord JSON, timing context) measured under a lease.

        Every reported candidate counts as a trial, even one without a record to keep
        (failures are data); a stale attempt keeps nothing. The report is committed with
        the others that arrive meanwhile (coordinator.fleet.group_commit).
        """
        prepared = self.prepare_report(agent_id, shard_id, attempt, records, progress)
        if isinstance(prepared, RecordReport):
            return prepared
        prepared = self.checked(prepared)
        return self.finish_report(prepared, self._reports.submit(prepared.report))

    def prepare_report(self, agent_id: str, shard_id: str, attempt: int,
                       records: ReportedRecords, progress: Sequence[dict]) -> PreparedReport | RecordReport:
        """A report checked against its job, ready for `enqueue_report`; or the answer already.

        Its records stay text here: whoever commits the group reads them (coordinator.fleet.report_ingest).
        """
        job = self._job_of_shard(shard_id)
        if job is None:
            return RecordReport(False, f"shard {shard_id} is unknown", 0, 0)
        return self._prepared(job, self._live.known(agent_id), agent_id, shard_id, attempt, records, progress)

    def prepare_cached_report(self, agent_id: str, shard_id: str, attempt: int,
                              records: ReportedRecords, progress: Sequence[dict]) -> PreparedReport | None:
        """`prepare_report` from memory alone, as almost every report can be; None when the
        registry must be read. Waits on no registry, so the server calls it on its event loop."""
        with self._lock:
            job = self._reporting_jobs.get(job_of_shard(shard_id))
        agent = self._live.cached(agent_id)
        if job is None or agent is None:
            return None
        return self._prepared(job, agent, agent_id, shard_id, attempt, records, progress)

    def seen_alive(self, prepared: PreparedReport) -> None:
        """The agent of a report prepared under its live lease is alive, as a heartbeat would say."""
        self._live.beat(prepared.report.agent_id, utc_now())

    def checked(self, prepared: PreparedReport) -> PreparedReport:
        """The prepared report without the records its job's tasks refuse (coordinator.calls.record_checks),
        each refusal counted, logged and said in the job's log. Replays traces: call it in the thread pool."""
        report = prepared.report
        if not report.records:
            return prepared
        with self._lock:
            job = self._reporting_jobs.get(report.job_id)
        if job is None:  # forgotten since it was prepared: read again
            job = self._job_of_shard(report.shard_id)
        if job is None:
            return prepared
        target_kind = json.loads(job.target)["kind"]
        kept, refused = [], []
        for workload_id, record_json, timing_context in report.records:
            reason = self._record_check.refusal(workload_id, job.flops.get(workload_id, 0.0), target_kind, record_json)
            if reason is None:
                kept.append((workload_id, record_json, timing_context))
            else:
                refused.append(f"record of workload {workload_id} refused: {reason}")
        if not refused:
            return prepared
        metrics.records_refused(report.fingerprint_id, len(refused))
        logger.warning("agent %s reported %d record(s) under shard %s that were refused; the first: %s",
                       report.agent_id, len(refused), report.shard_id, refused[0])
        unread = replace(report, records=kept, dropped=[*report.dropped, *refused])
        return replace(prepared, report=unread, refused=tuple(refused))

    def enqueue_report(self, prepared: PreparedReport) -> Future:
        """Queue a prepared report for the next group commit; its future holds the RecordReport."""
        return self._reports.enqueue(prepared.report)

    def finish_report(self, prepared: PreparedReport, result: RecordReport) -> RecordReport:
        metrics.report_committed(prepared.report, result)
        if result.accepted:
            # An accepted report came from the agent holding the lease: it is alive, as a
            # heartbeat would say; busy agents skip beats that would say nothing more
            # (agent.state.policy.heartbeat_due). Written back by the next tick, as beats are.
            self._live.beat(prepared.report.agent_id, utc_now())
            self._report_sizing.note(prepared.report.agent_id, prepared.report.trials)
            self._progress.note(prepared.job_id, prepared.report.shard_id, prepared.progress)
        return result

    def _prepared(self, job: _ReportingJob, agent: KnownAgent | None, agent_id: str, shard_id: str, attempt: int,
                  records: ReportedRecords, progress: Sequence[dict]) -> PreparedReport:
        kept, dropped = [], []
        for shash, record_json, timing_context in records:
            if not record_json:
                continue  # a candidate that failed: a trial without a record
            workload_id = job.workloads.get(shash)
            if workload_id is None:
                dropped.append(f"workload {shash} is not one of job {job.id}'s tasks")
                continue
            if timing_context not in RECORD_CONTEXTS:
                dropped.append(f"timing context {timing_context[:40]!r} is not one of {', '.join(RECORD_CONTEXTS)}")
                continue
            kept.append((workload_id, record_json, timing_context))
        events = [("task_progress", dict(item, shard_id=shard_id))
                  for item in self._progress_events.due(shard_id, list(progress))]
        report = UnreadReport(shard_id, attempt, agent_id, job.id, job.fingerprint_id, job.target, self._tvm_version,
                              {"tvm": agent.tvm_version} if agent else {}, kept, len(records), dropped, events)
        return PreparedReport(job.id, report, list(progress))

    def _job_of_shard(self, shard_id: str) -> _ReportingJob | None:
        """What reports under a shard need of its job; a job's tasks never change once planned."""
        job_id = job_of_shard(shard_id)
        if job_id is None:
            return None
        with self._lock:
            job = self._reporting_jobs.get(job_id)
        if job is not None:
            return job
        try:
            row = self._store.get_job(job_id)
        except NotFound:
            return None
        tasks = self._cluster.plans.job_tasks(job_id)
        if not tasks:
            return None  # not planned: it has no shards yet
        job = _ReportingJob(row.id, row.fingerprint_id, row.target, {t.workload_shash: t.workload_id for t in tasks},
                            {t.workload_id: t.flop for t in tasks})
        with self._lock:
            if len(self._reporting_jobs) > _MAX_REMEMBERED_JOBS:  # a long-lived coordinator forgets old jobs
                self._reporting_jobs.clear()
            self._reporting_jobs[job.id] = job
        return job
