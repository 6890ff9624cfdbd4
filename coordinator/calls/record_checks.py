"""Records an agent reports, checked against its shard's tasks before any is kept.

A record's trace must replay on the task's workload, as MetaSchedule reads a log; its times must
be ones a call of that kernel could take (foundation.domain.measured_times); its JSON must be of a
size a record has. A record filed without these checks ranked first for its workload and failed
every later plan and build of the model (the trace of a convolution under a matmul, timed at 1 ns).
A refused record is counted, logged and told to the agent; the rest of its report is kept.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict

from foundation.domain.measured_times import implausible_times
from foundation.registry.store import RegistryStore

logger = logging.getLogger("farm.coordinator")

# A record's JSON: MetaSchedule's traces of the largest fused kernels are tens of KiB.
MAX_RECORD_JSON = 1024 * 1024
# Workloads kept parsed; a report's come again and again while its job runs.
_MAX_PARSED_WORKLOADS = 512


class ReportedRecordCheck:
    """Why a reported record may not be kept (`refusal`), or None. Thread-safe; TVM is imported on first use."""

    def __init__(self, store: RegistryStore):
        self._store = store
        self._lock = threading.Lock()
        self._workloads: OrderedDict[int, object] = OrderedDict()  # registry workload id -> Workload

    def refusal(self, workload_id: int, flop: float, target_kind: str, record_json: str) -> str | None:
        if len(record_json) > MAX_RECORD_JSON:
            return f"its JSON is {len(record_json):,} characters long, more than the {MAX_RECORD_JSON:,} allowed"
        try:
            record = json.loads(record_json)
        except (ValueError, RecursionError) as err:
            return f"it is not JSON ({type(err).__name__})"
        if not isinstance(record, list) or len(record) != 4:
            return "it is not a TuningRecord's JSON ([trace, run_secs, target, args_info])"
        run_secs = record[1]
        if run_secs is not None and not isinstance(run_secs, list):
            return "its run_secs are not a list"
        reason = implausible_times(run_secs, flop)
        if reason is not None:
            return reason
        return self._replay_refusal(record, workload_id, target_kind)

    def _replay_refusal(self, record: list, workload_id: int, target_kind: str) -> str | None:
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics
        from foundation.meta_schedule.database.record_replay import UnusableRecord, replayed_record

        # A tensorized trace names the target's intrinsics: registered as the agents' builders do.
        install_lean_tensor_intrinsics(target_kind)
        try:
            # TIR schedules only, no Relax BlockBuilder: outside foundation.tvm_ir_lock, so that
            # reports do not wait behind a plan or a build.
            replayed_record(record, self._workload(workload_id))
        except UnusableRecord as unusable:
            return unusable.reason
        return None

    def _workload(self, workload_id: int):
        from tvm.s_tir.meta_schedule.database import Workload

        with self._lock:
            workload = self._workloads.get(workload_id)
            if workload is not None:
                self._workloads.move_to_end(workload_id)
                return workload
        _shash, mod_json = self._store.records.get_workloads([workload_id])[workload_id]
        workload = Workload.from_json(json.loads(mod_json))
        with self._lock:
            self._workloads[workload_id] = workload
            while len(self._workloads) > _MAX_PARSED_WORKLOADS:
                self._workloads.popitem(last=False)
        return workload
