"""TuningRecords as JSON, read and spelled without TVM: what reports carry and the registry keeps.

Kept apart from tvm_database so that a process that only files reported records (the
coordinator's ingest process, coordinator.fleet.ingest_process) never imports TVM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .entities import WARM_CONTEXT, NewRecord

# One encoder for every call: json.dumps with options builds a new one each time, which was a
# tenth of the cost of a report in the coordinator.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """One spelling per JSON value, so digests over it are stable."""
    try:
        # Values parsed from JSON (every reported record) are plain already; walking them
        # through plain_value was most of a report's cost in the coordinator.
        return _CANONICAL.encode(value)
    except TypeError:  # TVM FFI containers
        return _CANONICAL.encode(plain_value(value))


def plain_value(value: Any) -> Any:
    """TVM FFI containers (Map, Array) as Python dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain_value(v) for v in value]
    return value


def trace_json_is_valid(trace_json: Any) -> bool:
    """`trace_is_valid` read off a trace's JSON ([[inst, ...], decisions], each inst
    [kind name, inputs, attrs, outputs]), so records that arrive as JSON need no TVM parse."""
    insts = trace_json[0] if isinstance(trace_json, list) and trace_json else []
    return bool(insts) and isinstance(insts[0], list) and insts[0][0] != "EnterPostproc"


def new_record_from(
    record_json: Sequence[Any],
    *,
    workload_id: int,
    fingerprint_id: str,
    target_json: str,
    tvm_version: str,
    software: dict[str, Any] | None = None,
    job_id: str | None = None,
    timing_context: str = WARM_CONTEXT,
) -> NewRecord:
    """A registry record from ``TuningRecord.as_json()`` ([trace, run_secs, target, args_info]).

    The record is filed under ``target_json``, the scope it was tuned in, not the target
    spelled inside it: the registry keys on one canonical spelling per target. This is the
    one conversion, used by `RegistryDatabase` and for the JSON agents report.
    """
    if not isinstance(record_json, Sequence) or isinstance(record_json, str) or len(record_json) != 4:
        raise ValueError("a TuningRecord as JSON is [trace, run_secs, target, args_info]")
    trace, run_secs, _target, args_info = record_json
    return NewRecord(
        workload_id=workload_id,
        fingerprint_id=fingerprint_id,
        target=target_json,
        tvm_version=tvm_version,
        trace=canonical_json(trace),
        run_secs=None if run_secs is None else [float(v) for v in run_secs],
        args_info=None if args_info is None else canonical_json(args_info),
        software=dict(software or {}),
        job_id=job_id,
        trace_valid=trace_json_is_valid(trace),
        timing_context=timing_context,
    )
