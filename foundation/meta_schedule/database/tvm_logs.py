"""Import and export tuning logs in TVM's own JSONDatabase format."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.errors import BadInput, FarmError, NotFound
from foundation.registry.entities import NewRecord
from foundation.registry.store import RegistryStore

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@dataclass(frozen=True)
class ImportReport:
    workloads: int  # workloads named in the log
    records: int  # records new to the registry
    skipped_duplicates: int  # records the registry already had, with the same measurements
    measurements: int = 0  # new measurements merged into records the registry already had
    refused_foreign: int = 0  # records tuned for another target than the one they were to be filed under
    foreign_target: str | None = None  # how the first refused record's target differs, for people


# The attributes of a target that change the code it gets, and so what its measurements mean
# (TVM's spelling, from Target.export()).
CODE_ATTRIBUTES = ("kind", "mtriple", "mcpu", "mattr", "num-cores", "arch")


def _log_paths(
    path: str | os.PathLike[str] | tuple[str | os.PathLike[str], str | os.PathLike[str]],
) -> tuple[Path, Path]:
    if isinstance(path, tuple):
        return Path(path[0]), Path(path[1])
    path = Path(path)
    return path / WORKLOAD_FILE, path / RECORD_FILE


def _lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line; a broken line names itself."""
    if not path.is_file():
        raise NotFound(
            f"no TVM tuning log at {path}",
            f"expected {WORKLOAD_FILE} and {RECORD_FILE} from a JSONDatabase work_dir",
        )
    parsed = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                parsed.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise _broken(path, number, f"not JSON ({exc.msg})") from exc
    return parsed


def _broken(path: Path, number: int, reason: str) -> FarmError:
    return FarmError(
        f"{path}:{number}: {reason}; nothing was imported",
        "fix or delete that line, then import again",
    )


def import_tvm_logs(
    store: RegistryStore,
    path: str | os.PathLike[str] | tuple[str | os.PathLike[str], str | os.PathLike[str]],
    fingerprint_id: str,
    target_json: str | None,
    tvm_version: str,
    software: dict[str, Any],
    job_id: str | None = None,
) -> ImportReport:
    """Load a JSONDatabase log (a work_dir, or a (workload file, record file) pair).

    Everything is parsed by TVM first and written in one transaction, so a broken line
    leaves the registry untouched. Records are stored under ``target_json``; with None,
    under each record's own target. A record whose own target differs from ``target_json``
    in what changes its code (CODE_ATTRIBUTES: another mcpu, say) was measured for other
    hardware: it is refused and counted, never filed as this fingerprint's; when every record
    is refused, nothing is written and FarmError says why.
    """
    # TVM only here: the rest of the registry must import without it.
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from foundation.hardware.targets import to_tvm_target
    from foundation.meta_schedule.database.record_to_json import tuning_record_json
    from foundation.meta_schedule.database.registry_database import (
        canonical_json,
        canonical_target_json,
        trace_is_valid,
    )

    workload_path, record_path = _log_paths(path)
    wanted = None if target_json is None else _code_attributes(to_tvm_target(json.loads(target_json)))
    refused, foreign_target = 0, None
    workloads: list[Workload] = []
    keyed: list[tuple[str, str]] = []
    for number, line in _lines(workload_path):
        try:
            workload = Workload.from_json(line)
        except Exception as exc:  # TVM raises its own error types for malformed input
            raise _broken(
                workload_path, number, f"not a TVM workload ({_first_line(exc)})"
            ) from exc
        workloads.append(workload)
        shash = str(tvm_ffi.structural_hash(workload.mod))
        keyed.append(
            (shash, _stored_spelling(store, shash, workload) or canonical_json(workload.as_json()))
        )

    records: list[NewRecord] = []
    for number, line in _lines(record_path):
        try:
            index, record_json = line
            if not isinstance(index, int) or not 0 <= index < len(workloads):
                raise ValueError(f"workload index {index!r} is not a line of {workload_path.name}")
            record = TuningRecord.from_json(record_json, workloads[index])
        except Exception as exc:
            raise _broken(
                record_path, number, f"not a TVM tuning record ({_first_line(exc)})"
            ) from exc
        if wanted is not None and record.target is not None:
            difference = _difference(_code_attributes(record.target), wanted)
            if difference:
                refused += 1
                foreign_target = foreign_target or difference
                continue
        as_json = tuning_record_json(record)
        if target_json is not None:
            target = target_json
        elif record.target is not None:
            target = canonical_target_json(record.target)
        else:
            raise _broken(record_path, number, "the record has no target and none was given")
        records.append(
            NewRecord(
                workload_id=index,
                fingerprint_id=fingerprint_id,
                target=target,
                tvm_version=tvm_version,
                trace=canonical_json(as_json[0]),
                run_secs=None if record.run_secs is None else [float(v) for v in record.run_secs],
                args_info=None if as_json[3] is None else canonical_json(as_json[3]),
                software=dict(software),
                job_id=job_id,
                trace_valid=trace_is_valid(record),
            )
        )
    if refused and not records:
        raise BadInput(
            f"every record of {record_path} ({refused}) was tuned for another target than the one it would be "
            f"filed under: {foreign_target}; nothing was imported",
            "import a log on a box of the fingerprint it was tuned on, or name that fingerprint with --fingerprint",
        )
    _ids, inserted, merged = store.records.import_tuning_log(keyed, records)
    return ImportReport(
        workloads=len(workloads), records=inserted, skipped_duplicates=len(records) - inserted - merged,
        measurements=merged, refused_foreign=refused, foreign_target=foreign_target,
    )


def _code_attributes(target: Any) -> dict[str, Any]:
    """A TVM Target's CODE_ATTRIBUTES, mattr in order (absent ones are None)."""
    exported = dict(target.export())
    values = {name: exported.get(name) for name in CODE_ATTRIBUTES}
    if values["mattr"] is not None:
        values["mattr"] = sorted(str(a) for a in values["mattr"]) or None
    return {name: (None if value in ("", None) else value) for name, value in values.items()}


def _difference(theirs: dict[str, Any], ours: dict[str, Any]) -> str | None:
    """How a record's target differs from the one it would be filed under, in words, or None."""
    for name in CODE_ATTRIBUTES:
        if theirs[name] != ours[name]:
            return f"its {name} is {_shown(theirs[name])}, the fingerprint's target's {_shown(ours[name])}"
    return None


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)[:80]


def _stored_spelling(store: RegistryStore, shash: str, workload: Any) -> str | None:
    """The JSON of a stored workload structurally equal to ``workload``, if any.

    Another TVM build may serialize the same module differently; reusing the stored
    spelling keeps one workload row, so old and new records rank together.
    """
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import Workload

    for _id, mod_json in store.records.find_workloads(shash):
        if tvm_ffi.structural_equal(Workload.from_json(json.loads(mod_json)).mod, workload.mod):
            return mod_json
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def export_tvm_logs(
    store: RegistryStore,
    out_dir: str | os.PathLike[str],
    fingerprint_id: str,
    target_json: str | None = None,
    tvm_version: str | None = None,
) -> dict[str, int]:
    """Write the scope's records as a JSONDatabase work_dir; needs no TVM.

    Each record carries the target it was measured for, so one file may hold several.
    The files are replaced, not appended to.
    """
    stored = store.records.all_records(
        fingerprint_id=fingerprint_id, target=target_json, tvm_version=tvm_version
    )
    workloads = store.records.get_workloads(r.workload_id for r in stored)
    order = sorted(workloads)
    index = {workload_id: i for i, workload_id in enumerate(order)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_lines(out / WORKLOAD_FILE, [workloads[w][1] for w in order])
    _write_lines(
        out / RECORD_FILE,
        [
            json.dumps(
                [
                    index[r.workload_id],
                    [
                        json.loads(r.trace),
                        _run_secs(r),
                        json.loads(r.target),
                        None if r.args_info is None else json.loads(r.args_info),
                    ],
                ],
                separators=(",", ":"),
            )
            for r in stored
        ],
    )
    return {"workloads": len(order), "records": len(stored)}


def _run_secs(record) -> list[float] | None:
    """The record's measurements as TVM reads them: it ranks by their mean, the farm by the mean
    of every valid measurement merged into the record (its own run_secs are only the first's)."""
    if record.measurements > 1 and record.mean_sec is not None:
        return [record.mean_sec]
    return record.run_secs


def _write_lines(path: Path, lines: list[str]) -> None:
    # Written aside and renamed: a reader (or a crash) never sees half a log.
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(partial, path)
