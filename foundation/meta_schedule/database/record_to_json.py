"""A tuning record as JSON, for every trace MetaSchedule makes, layout rewrites included.

TVM's Python `TuningRecord.as_json()` refuses a trace that carries an IR object as an
instruction input: `TransformLayout`, which the RewriteLayout postprocessor adds to every
candidate of a prepacked workload (foundation.domain.weights_layout), takes an IndexMap.
TVM's own JSON database writes such an object as its `save_json` text, and
`TuningRecord.from_json` reads that text back; this does the same.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm.s_tir.meta_schedule import _ffi_api
from tvm.s_tir.meta_schedule.database import TuningRecord
from tvm.tirx import FloatImm, IntImm
from tvm_ffi import Array, Map


def tuning_record_json(record: TuningRecord) -> list:
    """[trace, run_secs, target, args_info] as plain Python values, like `as_json()`."""
    return _plain(_ffi_api.TuningRecordAsJSON(record))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, IntImm | FloatImm):
        return value.value
    if isinstance(value, Array):
        return [_plain(item) for item in value]
    if isinstance(value, Map):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return tvm.ir.save_json(value)
