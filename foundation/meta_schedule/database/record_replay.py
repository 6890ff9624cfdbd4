"""A TuningRecord read from JSON against its workload, its trace replayed there as MetaSchedule
reads a log (`TuningRecord.from_json`): a trace of another workload does not replay, and is unusable."""

from __future__ import annotations

from typing import Any

from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

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
