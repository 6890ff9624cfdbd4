"""Import and export tuning logs in TVM's own JSONDatabase format."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.errors import FarmError, NotFound
from foundation.meta_schedule.database.record_spool import RecordSpool
from foundation.registry.entities import WARM_CONTEXT, NewRecord
from foundation.registry.store import RegistryStore

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
# Told how an import goes, as farm.cli.progress's stage lines: (what it does, how far it got).
ImportProgress = Callable[[str, str], None]
# How often it is told: at every this much of the record file, and at the end.
PROGRESS_STEP = 0.1
# A record file smaller than this (about 500 records) is checked and stored in a few seconds: nothing to tell.
PROGRESS_FROM_BYTES = 1 << 20


def worth_telling(path: LogLocation) -> bool:
    """Whether importing the log at ``path`` takes long enough to tell how it goes (PROGRESS_FROM_BYTES)."""
    try:
        return _log_paths(path)[1].stat().st_size >= PROGRESS_FROM_BYTES
    except OSError:
        return False


@dataclass(frozen=True)
class ImportReport:
    workloads: int  # workloads named in the log
    records: int  # records new to the registry
    skipped_duplicates: int  # records the registry already had, with the same measurements
    measurements: int = 0  # new measurements merged into records the registry already had
    refused_foreign: int = 0  # records tuned for another target than the one they were to be filed under
    foreign_target: str | None = None  # how the first foreign record's target differs, for people
    # Foreign records are kept as seeds, filed under a fingerprint of the target they say they were
    # tuned for (log_fingerprint): never this fingerprint's measurements, measured here before use.
    seeds: int = 0  # foreign records new to the registry
    seed_fingerprints: tuple[str, ...] = ()


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


def _check_is_log(path: Path) -> None:
    if not path.is_file():
        raise NotFound(
            f"no TVM tuning log at {path}",
            f"expected {WORKLOAD_FILE} and {RECORD_FILE} from a JSONDatabase work_dir",
        )


def _lines(path: Path, read: Callable[[int], None] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line, one at a time; a broken line names
    itself. ``read`` is told the bytes read so far after each line."""
    _check_is_log(path)
    done = 0
    with path.open("rb") as lines:  # decoded line by line: a line that is not UTF-8 names itself too
        for number, raw in enumerate(lines, start=1):
            done += len(raw)
            if read is not None:
                read(done)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _broken(path, number, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
            if not line.strip():
                continue
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _broken(path, number, f"not JSON ({exc.msg})") from exc
            except RecursionError as exc:
                raise _broken(path, number, "not JSON the farm reads (nested too deeply)") from exc
            yield number, parsed


def _broken(path: Path, number: int, reason: str) -> FarmError:
    return FarmError(
        f"{path}:{number}: {reason}; nothing was imported",
        "fix or delete that line, then import again",
    )


# A JSONDatabase work_dir, or its (workload file, record file) pair.
LogLocation = str | os.PathLike[str] | tuple[str | os.PathLike[str], str | os.PathLike[str]]


@dataclass(frozen=True)
class TvmLog:
    """A JSONDatabase log read whole and checked, before anything is written: its workloads (TVM's),
    each with its structural hash, the records to store (``workload_id`` an index into ``workloads``),
    and the records refused as another target's. The records wait in spools (a log may be larger
    than memory); `store_tvm_logs` closes them."""

    workloads: list[Any]
    shashes: list[str]
    records: RecordSpool
    refused_foreign: int = 0
    foreign_target: str | None = None
    seeds: RecordSpool = field(default_factory=RecordSpool)
    # The fingerprints seeds are filed under: id -> (summary, details).
    seed_fingerprints: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


def import_tvm_logs(
    store: RegistryStore,
    path: LogLocation, fingerprint_id: str, target_json: str | None, tvm_version: str, software: dict[str, Any],
    job_id: str | None = None, progress: ImportProgress | None = None,
) -> ImportReport:
    """Load a JSONDatabase log (a work_dir, or a (workload file, record file) pair).

    Everything is parsed by TVM first, so a broken line leaves the registry untouched; then
    written in transactions of RecordSpool's batch (an import stopped then keeps what it wrote,
    and importing the log again adds the rest). Records are stored under ``target_json``; with None,
    under each record's own target. A record whose own target differs from ``target_json``
    in what changes its code (CODE_ATTRIBUTES: another mcpu, say) was measured for other
    hardware: it is refused and counted, never filed as this fingerprint's; when every record
    is refused, nothing is written and FarmError says why.
    """
    log = read_tvm_logs(path, fingerprint_id, target_json, tvm_version, software, job_id, progress)
    return store_tvm_logs(store, log, progress)


def read_tvm_logs(
    path: LogLocation, fingerprint_id: str, target_json: str | None, tvm_version: str, software: dict[str, Any],
    job_id: str | None = None, progress: ImportProgress | None = None,
) -> TvmLog:
    """`import_tvm_logs`' first half, which needs no registry: the log read and checked whole.
    Whatever would refuse the import (a broken line, impossible run times, a log of another
    target only) is raised here, so a caller can create the registry only for a log it will take."""
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
    seed_fingerprints: dict[str, tuple[str, dict[str, Any]]] = {}
    workloads: list[Workload] = []
    shashes: list[str] = []
    for number, line in _lines(workload_path):
        try:
            workload = Workload.from_json(line)
        except Exception as exc:  # TVM raises its own error types for malformed input
            raise _broken(
                workload_path, number, f"not a TVM workload ({_first_line(exc)})"
            ) from exc
        workloads.append(workload)
        shashes.append(str(tvm_ffi.structural_hash(workload.mod)))

    _check_is_log(record_path)
    records, seeds = RecordSpool(), RecordSpool()
    try:
        told = _Told(progress, "checking", record_path.stat().st_size, lambda: f"{len(records) + len(seeds):,} records")
        for number, line in _lines(record_path, told.read):
            try:
                index, record_json = line
                if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(workloads):
                    raise ValueError(f"workload index {index!r} is not a line of {workload_path.name}")
                # Checked before TVM reads them: its from_json ends the process on a null time ([null]).
                if isinstance(record_json, list) and len(record_json) > 1:
                    _check_run_secs(record_path, number, record_json[1])
                record = TuningRecord.from_json(record_json, workloads[index])
            except FarmError:
                raise
            except Exception as exc:
                raise _broken(
                    record_path, number, f"not a TVM tuning record ({_first_line(exc)})"
                ) from exc
            seed_fp = None
            if wanted is not None and record.target is not None:
                theirs = _code_attributes(record.target)
                difference = _difference(theirs, wanted)
                if difference:
                    refused += 1
                    foreign_target = foreign_target or difference
                    seed_fp, summary, details = log_fingerprint(theirs)
                    seed_fingerprints[seed_fp] = (summary, details)
            as_json = tuning_record_json(record)
            if seed_fp is not None:
                target = canonical_target_json(record.target)
            elif target_json is not None:
                target = target_json
            elif record.target is not None:
                target = canonical_target_json(record.target)
            else:
                raise _broken(record_path, number, "the record has no target and none was given")
            (seeds if seed_fp is not None else records).append(
                NewRecord(
                    workload_id=index,
                    fingerprint_id=seed_fp or fingerprint_id,
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
        told.finished()
    except BaseException:
        records.close()
        seeds.close()
        raise
    return TvmLog(workloads, shashes, records, refused, foreign_target, seeds, seed_fingerprints)


def store_tvm_logs(store: RegistryStore, log: TvmLog, progress: ImportProgress | None = None) -> ImportReport:
    """`import_tvm_logs`' second half: a log `read_tvm_logs` read, written a batch per transaction."""
    try:
        return _store(store, log, progress)
    finally:
        log.records.close()
        log.seeds.close()


def _store(store: RegistryStore, log: TvmLog, progress: ImportProgress | None) -> ImportReport:
    from foundation.meta_schedule.database.registry_database import canonical_json

    keyed = [
        (shash, _stored_spelling(store, shash, workload) or canonical_json(workload.as_json()))
        for shash, workload in zip(log.shashes, log.workloads, strict=True)
    ]
    for fp_id, (summary, details) in log.seed_fingerprints.items():
        store.upsert_fingerprint(fp_id, "cpu" if details.get("arch") else "cuda", summary, details)
    # This fingerprint's records, then the seeds, counted apart; the workloads with the first batch, so
    # that a registry refusing it (a fingerprint it does not have) keeps nothing. Everything was read
    # and checked before; a second import of the same log adds nothing.
    ids: list[int] | None = None
    total, stored = len(log.records) + len(log.seeds), 0
    told = _Told(progress, "storing", total, lambda: f"{stored:,} of {total:,} records")
    counts = []
    for spool in (log.records, log.seeds):
        inserted = merged = 0
        for batch in spool.batches():
            if ids is None:
                ids, new, more = store.records.import_tuning_log(keyed, batch)
            else:
                new, more = store.records.import_log_batch(ids, batch)
            inserted, merged, stored = inserted + new, merged + more, stored + len(batch)
            told.read(stored)
        counts.append((inserted, merged))
    if ids is None:
        store.records.import_tuning_log(keyed, [])
    told.finished()
    (inserted, merged), (seeds, seeds_merged) = counts
    return ImportReport(
        workloads=len(log.workloads), records=inserted,
        skipped_duplicates=len(log.records) - inserted - merged + len(log.seeds) - seeds - seeds_merged,
        measurements=merged + seeds_merged, refused_foreign=log.refused_foreign, foreign_target=log.foreign_target,
        seeds=seeds, seed_fingerprints=tuple(sorted(log.seed_fingerprints)),
    )


class _Told:
    """Tells ``progress`` how a step goes, at every PROGRESS_STEP of ``total`` and once at the end."""

    def __init__(self, progress: ImportProgress | None, state: str, total: int, done: Callable[[], str]):
        self.progress, self.state, self.total, self.done = progress, state, max(total, 1), done
        self.next_at = PROGRESS_STEP

    def read(self, amount: int) -> None:
        if self.progress is not None and amount / self.total >= self.next_at and amount < self.total:
            self.next_at = (int(amount / self.total / PROGRESS_STEP) + 1) * PROGRESS_STEP
            self.progress(self.state, f"{self.done()} ({amount / self.total:.0%})")

    def finished(self) -> None:
        if self.progress is not None:
            self.progress(self.state, f"{self.done()} (100%)")


def log_fingerprint(code: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The fingerprint a foreign log's records are filed under as seeds: what their target says of the
    hardware (kind, triple, CPU, cores, arch), no more. Its id is a digest of that, so every log of
    one target files under one fingerprint; `farm registry show ID` says where it came from."""
    import hashlib

    said = {name: code.get(name) for name in CODE_ATTRIBUTES}
    digest = hashlib.sha256(json.dumps(said, sort_keys=True, default=str).encode()).hexdigest()[:12]
    if said["kind"] == "cuda":
        arch = str(said.get("arch") or "")
        capability = f"{arch[3:-1]}.{arch[-1]}" if arch.startswith("sm_") and len(arch) > 4 else "unknown"
        details = {"source": "imported TVM log", "name": "unknown (imported TVM log)",
                   "compute_capability": capability, "sm_count": 0, "memory_gib": 0}
        return (f"cuda-log-{digest}", f"imported TVM log for cuda {arch or '(arch unset)'}", details)
    triple = said.get("mtriple")
    details = {"source": "imported TVM log", "arch": str(triple).split("-")[0] if triple else "unknown",
               "vendor": None, "model": "unknown (imported TVM log)", "features": [],
               "cores": said.get("num-cores") or 0, "llvm_mcpu": said.get("mcpu") or "generic",
               "llvm_triple": triple or "unset", "mattr": said.get("mattr")}
    summary = (f"imported TVM log for llvm, mcpu {said.get('mcpu') or 'unset'}, "
               f"num-cores {said.get('num-cores') or 'unset'}")
    return f"cpu-log-{digest}", summary, details


def _check_run_secs(path: Path, number: int, run_secs: Any) -> None:
    """Refuse times no run gives: a record's run_secs are null (not measured yet, as TVM writes it)
    or seconds, each positive and finite (TVM writes 1e10 for a run that failed)."""
    if run_secs is None:
        return
    if isinstance(run_secs, list) and run_secs and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in run_secs
    ):
        return
    raise _broken(
        path, number,
        f"its run_secs {_shown(run_secs)} are not run times (null, or a list of positive, finite seconds)",
    )


def _code_attributes(target: Any) -> dict[str, Any]:
    """A TVM Target's CODE_ATTRIBUTES, mattr in order (absent ones are None). An llvm target without
    a triple compiles for the host's, as LLVM reports it: that is what it was tuned for."""
    exported = dict(target.export())
    values = {name: exported.get(name) for name in CODE_ATTRIBUTES}
    if values["mattr"] is not None:
        values["mattr"] = sorted(str(a) for a in values["mattr"]) or None
    if values["kind"] == "llvm" and values["mtriple"] in ("", None):
        from tvm.target import codegen

        values["mtriple"] = str(codegen.llvm_get_system_triple())
    return {name: (None if value in ("", None) else value) for name, value in values.items()}


def _difference(theirs: dict[str, Any], ours: dict[str, Any]) -> str | None:
    """How a record's target differs from the one it would be filed under, in words, or None.
    Triples of one architecture and OS give the same code, whatever vendor field they spell
    (x86_64-pc-linux-gnu, x86_64-conda-linux-gnu)."""
    for name in CODE_ATTRIBUTES:
        same = (_arch_and_os(theirs[name]) == _arch_and_os(ours[name]) if name == "mtriple"
                else theirs[name] == ours[name])
        if not same:
            return f"its {name} is {_shown(theirs[name])}, the fingerprint's target's {_shown(ours[name])}"
    return None


def _arch_and_os(triple: Any) -> tuple[str, ...] | None:
    if triple is None:
        return None
    parts = str(triple).split("-")
    return (parts[0], parts[2]) if len(parts) >= 3 else tuple(parts)


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
    The files are replaced, not appended to. TVM ranks a log's records of a workload together, and
    times of two timing contexts do not compare: a workload's records are written of one context
    alone (`_one_context_each`).
    """
    stored = _one_context_each(store.records.all_records(
        fingerprint_id=fingerprint_id, target=target_json, tvm_version=tvm_version
    ))
    workloads = store.records.get_workloads(r.workload_id for r in stored)
    order = sorted(workloads)
    index = {workload_id: i for i, workload_id in enumerate(order)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_logs({
        out / WORKLOAD_FILE: [workloads[w][1] for w in order],
        out / RECORD_FILE: [
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
    })
    return {"workloads": len(order), "records": len(stored)}


def _one_context_each(stored: list) -> list:
    """``stored`` with each workload's records of one timing context: the context other than warm
    with the most valid records (only a fingerprint whose tunes time it so has any), else warm."""
    valid: dict[int, dict[str, int]] = {}
    for r in stored:
        of_workload = valid.setdefault(r.workload_id, {})
        of_workload[r.timing_context] = of_workload.get(r.timing_context, 0) + (r.mean_sec is not None)
    chosen: dict[int, str] = {}
    for workload_id, contexts in valid.items():
        measured = sorted((c for c in contexts if c != WARM_CONTEXT and contexts[c] > 0), key=lambda c: -contexts[c])
        chosen[workload_id] = (measured[0] if measured else WARM_CONTEXT if WARM_CONTEXT in contexts
                               else max(contexts, key=lambda c: contexts[c]))
    return [r for r in stored if chosen[r.workload_id] == r.timing_context]


def _run_secs(record) -> list[float] | None:
    """The record's measurements as TVM reads them: it ranks by their mean, the farm by the mean
    of every valid measurement merged into the record (its own run_secs are only the first's)."""
    if record.measurements > 1 and record.mean_sec is not None:
        return [record.mean_sec]
    return record.run_secs


def _write_logs(logs: dict[Path, list[str]]) -> None:
    """Write the logs as a pair: each aside (``.partial``), then renamed into place once all are
    written, so a reader never sees half a log, nor a workload file and a record file of two
    exports. On a failure, the files that were there stay as they were and no ``.partial`` is
    left; the OSError names the log that could not be written."""
    for path in logs:
        if path.is_dir():  # os.replace would fail only after the other log was replaced
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    aside = {path: path.with_name(path.name + ".partial") for path in logs}
    replaced: list[tuple[Path, Path | None]] = []  # each log replaced so far, and a copy of what it was
    copies: list[Path] = []
    try:
        for path, lines in logs.items():
            with _naming(path):
                aside[path].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        for path in logs:
            previous = _keep(path)
            if previous is not None:
                copies.append(previous)
            with _naming(path):
                os.replace(aside[path], path)
            replaced.append((path, previous))
    except BaseException:
        for path, previous in reversed(replaced):  # put back what the logs were
            if previous is not None:
                os.replace(previous, path)
            else:
                path.unlink(missing_ok=True)
        raise
    finally:
        for leftover in [*aside.values(), *copies]:
            leftover.unlink(missing_ok=True)


def _keep(path: Path) -> Path | None:
    """A copy of ``path`` beside it (a hard link where the file system has them), or None when there
    is no such file: what undoes its replacement."""
    if not path.exists():
        return None
    previous = path.with_name(path.name + ".previous")
    with _naming(path):
        previous.unlink(missing_ok=True)
        try:
            os.link(path, previous)
        except OSError:
            shutil.copy2(path, previous)
    return previous


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError raised inside names ``path``, the log, not the file beside it that was at fault."""
    try:
        yield
    except OSError as err:
        raise type(err)(err.errno, err.strerror, str(path)) from err
