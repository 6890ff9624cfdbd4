"""The MetaSchedule database an agent tunes a shard with: warm from the registry, reporting back.

An agent has no registry connection. The coordinator hands it the registry's best records
for the shard's workloads (warm start); everything the agent measures is kept in memory for
the search and sent to the coordinator in batches as it is measured, while the search goes on
(foundation.meta_schedule.database.report_pipeline), so an agent killed mid-shard loses at most the batch in flight and
the records measured since.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from foundation.domain.timing_context import TimingContext
from foundation.meta_schedule.database.report_pipeline import ReportPipeline

_LOG = logging.getLogger(__name__)

# A batch of measured records, each as (workload shash, TuningRecord JSON text, timing context).
Reporter = Callable[[list[tuple[str, str, str]]], None]


@dataclass
class ReportBatching:
    """How measured records are batched into reports: the coordinator sets it with the lease and
    may change it with each report's answer (coordinator.fleet.report_sizing)."""

    records: int = 16  # a batch is sent once it holds this many records
    within_s: float = 10.0  # or once its first record has waited this long

    def follow(self, records: int, within_s: float) -> None:
        """Take the coordinator's sizes; zero (unset on the wire) keeps the current one."""
        if records > 0:
            self.records = records
        if within_s > 0:
            self.within_s = within_s


def shard_database(
    workloads: Sequence[tuple[str, "object"]],
    warm_records: Sequence[tuple[str, str]],
    report: Reporter,
    batching: ReportBatching | None = None,
    clock: Callable[[], float] = time.monotonic,
):
    """A PyDatabase over MetaSchedule's MemoryDatabase.

    ``workloads`` are (shash, IRModule) of the shard's tasks; ``warm_records`` are
    (shash, TuningRecord JSON) the search starts from; ``report`` receives batches of the
    records measured here, on a thread of its own, one batch at a time, as ``batching`` says
    (read at each commit, so a change applies to the batch being filled). Call ``flush()``
    when tuning ends (it returns once every record was reported), and ``close()`` in any case.
    """
    import json

    import tvm_ffi
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.database import MemoryDatabase, PyDatabase

    from foundation.meta_schedule.database.record_replay import UnusableRecord, replayed_record
    from foundation.meta_schedule.database.record_to_json import tuning_record_json

    inner = MemoryDatabase()
    by_shash = {}
    for shash, mod in workloads:
        workload = inner.commit_workload(mod)
        by_shash[shash] = workload
    for shash, record_json in warm_records:
        workload = by_shash.get(shash)
        if workload is None:
            continue
        try:
            inner.commit_tuning_record(replayed_record(json.loads(record_json), workload))
        except UnusableRecord as unusable:  # filed before reports were checked: the search starts without it
            _LOG.warning("a warm record of workload %s is left out: %s", shash, unusable.reason)

    def shash_for(workload) -> str:
        for shash, known in by_shash.items():
            if known.same_as(workload) or tvm_ffi.structural_equal(known.mod, workload.mod):
                return shash
        # A workload outside the shard's tasks (MetaSchedule does not create these today).
        shash = str(tvm_ffi.structural_hash(workload.mod))
        by_shash[shash] = workload
        return shash

    batching = batching or ReportBatching()
    # The cache state each task's candidates are timed in (time_tasks_in), by workload shash; warm
    # where the tuner says nothing (a GPU, a warm run).
    contexts: dict[str, str] = {}

    @derived_object
    class _ShardDatabase(PyDatabase):
        def __init__(self):
            super().__init__()
            self.pending: list[tuple[str, str, str]] = []
            self.pending_since = 0.0  # when the oldest pending record was measured
            self.reports = ReportPipeline(report)

        def has_workload(self, mod):
            return inner.has_workload(mod)

        def commit_workload(self, mod):
            return inner.commit_workload(mod)

        def commit_tuning_record(self, record):
            inner.commit_tuning_record(record)
            now = clock()
            if not self.pending:
                self.pending_since = now
            shash = shash_for(record.workload)
            context = contexts.get(shash, TimingContext.WARM.value)
            self.pending.append((shash, json.dumps(tuning_record_json(record)), context))
            # MetaSchedule commits a round's candidates together, so the time bound is looked
            # at often enough without a timer of its own.
            if len(self.pending) >= batching.records or now - self.pending_since >= batching.within_s:
                self._send_pending()

        def time_tasks_in(self, mods, timing_contexts) -> None:
            """The tuner times the candidates of task ``mods[i]`` in ``timing_contexts[i]``: its records say so."""
            for mod, context in zip(mods, timing_contexts):
                contexts[shash_for(inner.commit_workload(mod))] = context

        def get_top_k(self, workload, top_k):
            return inner.get_top_k(workload, top_k)

        def get_all_tuning_records(self):
            return inner.get_all_tuning_records()

        def query_tuning_record(self, mod, target, workload_name):
            return inner.query_tuning_record(mod, target, workload_name)

        def query_schedule(self, mod, target, workload_name):
            return inner.query_schedule(mod, target, workload_name)

        def query_ir_module(self, mod, target, workload_name):
            return inner.query_ir_module(mod, target, workload_name)

        def __len__(self):
            return len(inner)

        def _send_pending(self) -> None:
            batch, self.pending = self.pending, []
            try:
                self.reports.send(batch)  # raises the error of the report before, if it failed
            except BaseException:
                self._keep_failed(batch)
                raise

        def _keep_failed(self, unsent: list) -> None:
            # Kept for the next flush, in the order they were measured.
            self.pending = (self.reports.take_failed() or []) + unsent + self.pending

        def flush(self) -> int:
            """Report what is pending and wait until every report is answered; the records reported."""
            before = self.reports.sent
            if self.pending:
                self._send_pending()
            try:
                self.reports.wait()
            except BaseException:
                self._keep_failed([])
                raise
            return self.reports.sent - before

        def close(self) -> None:
            self.reports.close()

    return _ShardDatabase()
