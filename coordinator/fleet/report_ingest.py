"""Reported records, from the JSON agents send to rows in the registry, a group of reports at a time.

The serving process only checks what a report is about (`UnreadReport`) and leaves its
records as text; whoever commits the group reads them (`read_report`) and commits the group in
one transaction (`ingest_reports`): the coordinator's ingest process
(coordinator.fleet.ingest_process) on PostgreSQL, or its own commit thread. An unreadable
record is dropped and said so in the job's log. Everything here is plain data and TVM-free,
so that it crosses to that process cheaply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from foundation.registry.entities import RecordReport, ReportedBatch
from foundation.registry.reported_records import new_record_from


@dataclass(frozen=True)
class UnreadReport:
    """A report under a lease, checked against its job, its records still as reported."""

    shard_id: str
    attempt: int
    agent_id: str
    job_id: str
    fingerprint_id: str
    target: str  # the job's target, canonical JSON: the scope records are filed under
    tvm_version: str
    software: dict[str, Any]
    records: Sequence[tuple[int, str, str]]  # (registry workload id, TuningRecord JSON, timing context)
    trials: int  # candidates measured, with or without a record worth keeping
    dropped: Sequence[str] = ()  # why reported records were not kept, found before reading
    events: Sequence[tuple[str, dict[str, Any]]] = ()


def read_report(report: UnreadReport) -> ReportedBatch:
    """The report with its records read; unreadable ones are dropped and said so in the job's log."""
    records, dropped = [], list(report.dropped)
    for workload_id, record_json, timing_context in report.records:
        try:
            record = new_record_from(
                json.loads(record_json), workload_id=workload_id, fingerprint_id=report.fingerprint_id,
                target_json=report.target, tvm_version=report.tvm_version, software=report.software,
                job_id=report.job_id, timing_context=timing_context)
            if record.run_secs is not None and not all(math.isfinite(s) for s in record.run_secs):
                raise ValueError("its run_secs are not all finite (the registry's JSON cannot hold NaN or infinity)")
            records.append(record)
        # JSON of any other shape than a record's (a number for run_secs, a trace that is a
        # dict) is dropped too: raised here, it would fail the whole group, other agents' reports with it.
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as err:
            dropped.append(f"unreadable record: {type(err).__name__}: {str(err)[:200]}")
    events = list(report.events)
    if dropped:
        events.append(("log", {"source": report.agent_id, "level": "warning",
                               "message": f"{len(dropped)} reported record(s) were not kept: {dropped[0]}"}))
    return ReportedBatch(report.shard_id, report.attempt, report.agent_id, records, report.trials, events)


def ingest_reports(cluster, reports: Sequence[UnreadReport]) -> list[RecordReport]:
    """Read a group of reports and commit them in one transaction (`ClusterStore.reports.ingest_reports`)."""
    return cluster.reports.ingest_reports([read_report(report) for report in reports])
