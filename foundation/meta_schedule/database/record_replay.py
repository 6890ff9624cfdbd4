"""A TuningRecord read from JSON against its workload, its trace replayed there as MetaSchedule
reads a log (`TuningRecord.from_json`): a trace of another workload does not replay, and is unusable;
which stored records are unusable so (`farm registry forget --unusable`); and which records arriving
in a sync are (`ArrivingRecordCheck`, foundation.registry.sync's RecordCheck)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

from foundation.domain.measured_times import MIN_CALL_SECS
from foundation.hardware.versions import tvm_version
from foundation.registry.entities import StoredRecord
from foundation.registry.store import RegistryStore, target_kind_of

# What a trace that does not fit its workload raises while it is replayed: TVM's errors are
# RuntimeErrors (InternalError, ScheduleError); JSON of another shape fails as Python does.
REPLAY_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)


class UnusableRecord(ValueError):
    """A record whose trace does not replay on its workload; ``reason`` says how it failed."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def replayed_record(record_json: Any, workload: Workload) -> TuningRecord:
    """The record of ``record_json`` ([trace, run_secs, target, args_info]) on ``workload``; raises
    UnusableRecord when its trace does not replay there."""
    try:
        return TuningRecord.from_json(record_json, workload)
    except REPLAY_ERRORS as err:
        first_line = (str(err).strip().splitlines() or [""])[-1]
        raise UnusableRecord(f"its trace does not replay on the workload ({type(err).__name__}: "
                             f"{first_line[:200]})") from None


def record_json(trace: str, run_secs: Any, target: str, args_info: str | None) -> list:
    """A record's stored columns as MetaSchedule's JSON, [trace, run_secs, target, args_info]."""
    return [json.loads(trace), run_secs, json.loads(target), None if args_info is None else json.loads(args_info)]


def stored_record_json(stored: StoredRecord) -> list:
    """The stored record as MetaSchedule's JSON, [trace, run_secs, target, args_info]."""
    return record_json(stored.trace, stored.run_secs, stored.target, stored.args_info)


def unusable_reason(stored: StoredRecord, workload: Workload) -> str | None:
    """Why a stored record should not be used (its trace does not replay on ``workload``, or its
    mean time is below any call's), or None. A tensorized trace needs its target's intrinsics
    registered first (foundation.hardware.tvm_startup.install_lean_tensor_intrinsics)."""
    try:
        replayed_record(stored_record_json(stored), workload)
    except UnusableRecord as unusable:
        return unusable.reason
    except ValueError as err:  # its stored text is not JSON
        return f"it is not a TuningRecord's JSON ({type(err).__name__})"
    if stored.mean_sec is not None and stored.mean_sec < MIN_CALL_SECS:
        return f"its mean time, {stored.mean_sec:g} s, is below the {MIN_CALL_SECS:g} s any call of a kernel takes"
    return None


def unusable_records(store: RegistryStore, records: Sequence[StoredRecord]) -> dict[int, str]:
    """Record id -> why (`unusable_reason`), for the unusable ones of ``records``."""
    from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

    workloads = {i: Workload.from_json(json.loads(mod_json))
                 for i, (_shash, mod_json) in store.records.get_workloads({r.workload_id for r in records}).items()}
    for kind in {target_kind_of(r.target) for r in records}:
        install_lean_tensor_intrinsics(kind)
    found = {}
    for stored in records:
        reason = unusable_reason(stored, workloads[stored.workload_id])
        if reason is not None:
            found[stored.id] = reason
    return found


class ArrivingRecordCheck:
    """Why a record arriving in a sync may not be stored (foundation.registry.sync.RecordCheck): its
    trace does not replay on its workload. A record of another TVM is not replayed: this TVM may not
    read its trace, and the registry never serves it here."""

    def __init__(self):
        self._version = tvm_version()
        self._workloads: dict[str, Workload | str] = {}  # module JSON -> its Workload, or why it cannot be read

    def __call__(self, mod_json: str, record: dict) -> str | None:
        from foundation.hardware.tvm_startup import install_lean_tensor_intrinsics

        if record["tvm_version"] != self._version:
            return None
        try:
            arriving = record_json(record["trace"], record["run_secs"], record["target"], record["args_info"])
        except (ValueError, TypeError) as err:
            return f"it is not a TuningRecord's JSON ({type(err).__name__})"
        workload = self._workload(mod_json)
        if isinstance(workload, str):
            return workload
        # A tensorized trace names the target's intrinsics: registered as the builders do.
        install_lean_tensor_intrinsics(target_kind_of(record["target"]))
        try:
            replayed_record(arriving, workload)
        except UnusableRecord as unusable:
            return unusable.reason
        return None

    def _workload(self, mod_json: str) -> Workload | str:
        if mod_json not in self._workloads:
            try:
                self._workloads[mod_json] = Workload.from_json(json.loads(mod_json))
            except REPLAY_ERRORS as err:
                self._workloads[mod_json] = f"its workload's module cannot be read ({type(err).__name__})"
        return self._workloads[mod_json]
