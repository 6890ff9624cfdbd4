"""Workloads and tuning records in the registry: commit, de-duplicate, rank (a RegistryStore part)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Select, bindparam, case, func, select, update
from sqlalchemy.orm import Session

from foundation.clock import utc_now
from foundation.errors import RegistryError

from .entities import WARM_CONTEXT, Measurement, NewRecord, StoredRecord
from .schema import Base, TuningMeasurementRow, TuningRecordRow, WorkloadRow
from .session import Changes, UnitOfWork

# MetaSchedule's stand-in for "no time measured" (SortTuningRecordByMeanRunSecs::kMaxMeanTime).
MEASUREMENT_FAILED_SEC = 1e10
# Rows per INSERT statement: stays under SQLite's bound-parameter limit with room to spare.
_INSERT_CHUNK = 500


# PostgreSQL: the rows as one array per column, bound in binary, one statement whatever their
# number. A multi-row VALUES list of 500 rows is a new SQL text of thousands of placeholders
# each time, which the driver re-parses in Python (two thirds of a report's cost at 1,000
# agents); this text is always the same. Binary arrays are neither escaped by the driver nor
# parsed by the server: each value arrives as its length and its bytes. (Before, the rows went
# as one JSON document, and PostgreSQL spent 40% of its time on an insert lexing it, three
# times over: docs/benchmarks.md, "Coordinator at scale".) Each value is bound on its own, so
# no text in one can change another field or add a row, as on SQLite.
_RECORD_COLUMNS = (
    ("workload_id", "bigint"), ("fingerprint_id", "text"), ("target", "text"), ("tvm_version", "text"),
    ("software", "json"), ("trace", "text"), ("args_info", "text"), ("run_secs", "json"),
    ("mean_sec", "float8"), ("job_id", "text"), ("record_digest", "text"), ("created_at", "timestamptz"),
    ("measurements", "int4"), ("valid_measurements", "int4"), ("measurement_digest", "text"),
    ("timing_context", "text"),
)
_COLUMN_NAMES = ", ".join(name for name, _ in _RECORD_COLUMNS)
# JSON values travel as text arrays and are read once each, as the row is made.
_INSERT_FROM_ARRAYS = (
    f"INSERT INTO tuning_records ({_COLUMN_NAMES}) "
    f"SELECT {', '.join(f'r.{name}::json' if kind == 'json' else f'r.{name}' for name, kind in _RECORD_COLUMNS)} "
    f"FROM unnest({', '.join('%b::text[]' if kind == 'json' else f'%b::{kind}[]' for _, kind in _RECORD_COLUMNS)}) "
    f"AS r({_COLUMN_NAMES}) "
    "ON CONFLICT (record_digest) DO NOTHING RETURNING record_digest"
)


def _json_number(value: float | None) -> str:
    # repr spells a finite float as JSON does; json.dumps costs ten times more per call.
    if value is None:
        return "null"
    return repr(value) if math.isfinite(value) else json.dumps(value)


def _insert_from_arrays(session: Session, rows: list[dict[str, Any]]) -> set[str]:
    # A batch's rows share their job's software dict, in equal copies: encoded once per batch.
    software: dict[str, str] = {}
    columns = []
    for name, _ in _RECORD_COLUMNS:
        if name == "software":
            values = [software.setdefault(repr(row[name]), json.dumps(row[name])) for row in rows]
        elif name == "run_secs":
            values = [None if row[name] is None else "[" + ",".join(map(_json_number, row[name])) + "]"
                      for row in rows]
        else:
            values = [row[name] for row in rows]
        columns.append(values)
    return set(session.connection().exec_driver_sql(_INSERT_FROM_ARRAYS, tuple(columns)).scalars())


def mean_run_sec(run_secs: Sequence[float | None] | None, trace_valid: bool = True) -> float | None:
    """The sort key MetaSchedule uses, or None where it would call the record invalid."""
    if not trace_valid or not run_secs:
        return None
    measured = [float(v) for v in run_secs if v is not None]
    if not measured or min(measured) == max(measured) == MEASUREMENT_FAILED_SEC:
        return None
    if not all(0 < v < math.inf for v in measured):  # no run takes no, negative, NaN or infinite time
        return None
    return sum(measured) / len(measured)


def record_digest(mod_sha256: str, record: NewRecord) -> str:
    """Which record a measured trace is: its workload, scope and trace. A record timed warm is
    keyed as before contexts were kept, so that the digests of every registry, pack and log filed
    then still name the same records."""
    parts: tuple[str, ...] = (mod_sha256, record.fingerprint_id, record.target, record.tvm_version, record.trace)
    if record.timing_context != WARM_CONTEXT:
        parts = (*parts, record.timing_context)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def measurement_digest(record_digest: str, run_secs: Sequence[float] | None) -> str:
    """Which measurement of a record this is: its record and its exact times. The same numbers
    again (a retried report, a log exported and imported back) are the same measurement; two
    runs of a real device never give the same floats. (Frozen in migration 0004_record_merge.)"""
    numbers = "null" if run_secs is None else "[" + ",".join(_json_number(float(v)) for v in run_secs) + "]"
    return hashlib.sha256(f"{record_digest}\x1f{numbers}".encode()).hexdigest()


# A later valid measurement moves its record's mean (over its valid measurements); a failed one
# is counted and kept, and leaves the mean as it was. One statement each, so that concurrent
# writers merging into one record never lose an update.
_MERGE_VALID = (
    update(TuningRecordRow)
    .where(TuningRecordRow.id == bindparam("record_id"))
    .values(
        measurements=TuningRecordRow.measurements + 1,
        valid_measurements=TuningRecordRow.valid_measurements + 1,
        mean_sec=case(
            (TuningRecordRow.mean_sec.is_(None), bindparam("new_mean")),
            else_=(TuningRecordRow.mean_sec * TuningRecordRow.valid_measurements + bindparam("new_mean"))
            / (TuningRecordRow.valid_measurements + 1),
        ),
    )
)
_MERGE_FAILED = (
    update(TuningRecordRow)
    .where(TuningRecordRow.id == bindparam("record_id"))
    .values(measurements=TuningRecordRow.measurements + 1)
)


class TuningRecords:
    """Workloads and their tuning records (`RegistryStore.records`), over the store's unit of work."""

    def __init__(self, unit: UnitOfWork, insert_statement: Callable[[type[Base]], Any], dialect: str, url: str):
        self._unit = unit
        self.insert_statement = insert_statement  # INSERT ... ON CONFLICT in the registry's dialect
        self._dialect = dialect
        self.url = url  # masked: what errors may name

    def commit_workload(self, shash: str, mod_json: str) -> int:
        """Store a workload unless its JSON is already stored; returns its id either way."""
        with self._unit.write(Changes.STATE) as session:
            return self.commit_workload_in(session, shash, mod_json)

    def commit_workload_in(self, session: Session, shash: str, mod_json: str) -> int:
        digest = hashlib.sha256(mod_json.encode()).hexdigest()
        session.execute(
            self.insert_statement(WorkloadRow)
            .values(shash=shash, mod_json=mod_json, mod_sha256=digest, created_at=utc_now())
            .on_conflict_do_nothing(index_elements=["mod_sha256"])
        )
        return session.scalars(select(WorkloadRow.id).where(WorkloadRow.mod_sha256 == digest)).one()

    def find_workloads(self, shash: str) -> list[tuple[int, str]]:
        """Every stored workload with this structural hash, oldest first, as (id, mod_json)."""
        query = (
            select(WorkloadRow.id, WorkloadRow.mod_json)
            .where(WorkloadRow.shash == shash)
            .order_by(WorkloadRow.id)
        )
        with self._unit.read() as session:
            return [(i, j) for i, j in session.execute(query)]

    def get_workloads(self, workload_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
        """Workloads by id, as id -> (shash, mod_json)."""
        ids = sorted(set(workload_ids))
        if not ids:
            return {}
        query = select(WorkloadRow.id, WorkloadRow.shash, WorkloadRow.mod_json).where(
            WorkloadRow.id.in_(ids)
        )
        with self._unit.read() as session:
            return {i: (s, j) for i, s, j in session.execute(query)}

    def add_tuning_records(self, records: Iterable[NewRecord]) -> int:
        """Insert records in one transaction; returns how many were new (duplicates skip)."""
        records = list(records)
        if not records:
            return 0
        with self._unit.write(Changes.STATE) as session:
            return self.insert_records_in(session, records)

    def import_tuning_log(
        self, workloads: Sequence[tuple[str, str]], records: Sequence[NewRecord]
    ) -> tuple[list[int], int, int]:
        """Store a whole log in one transaction.

        ``workloads`` are (shash, mod_json); each record's ``workload_id`` is an index into
        that list. Returns the workload ids (in the same order), the number of new records, and
        the number of new measurements merged into records the registry already had.
        """
        with self._unit.write(Changes.STATE) as session:
            ids = [self.commit_workload_in(session, shash, mod_json) for shash, mod_json in workloads]
            try:
                resolved = [_with_workload(r, ids[r.workload_id]) for r in records]
            except IndexError as exc:
                raise RegistryError(
                    "a tuning record names a workload the log does not have"
                ) from exc
            if not resolved:
                return ids, 0, 0
            _digests, inserted, merged = self._insert_and_merge_in(session, resolved)
            return ids, len(inserted), merged

    def import_log_batch(self, workload_ids: Sequence[int], records: Sequence[NewRecord]) -> tuple[int, int]:
        """A further batch of a log's records, in one transaction; each record's ``workload_id`` is an
        index into ``workload_ids`` (what `import_tuning_log` of the first batch returned). Returns the
        number of new records, and of new measurements merged into records the registry already had
        (an earlier batch's too)."""
        with self._unit.write(Changes.STATE) as session:
            try:
                resolved = [_with_workload(r, workload_ids[r.workload_id]) for r in records]
            except IndexError as exc:
                raise RegistryError("a tuning record names a workload the log does not have") from exc
            if not resolved:
                return 0, 0
            _digests, inserted, merged = self._insert_and_merge_in(session, resolved)
            return len(inserted), merged

    def insert_records_in(self, session: Session, records: list[NewRecord]) -> int:
        """Insert records inside the caller's transaction; returns how many were new."""
        return len(self.insert_records_keyed_in(session, records)[1])

    def insert_records_keyed_in(
        self, session: Session, records: Sequence[NewRecord]
    ) -> tuple[list[str], set[str]]:
        """Insert records inside the caller's transaction; returns each record's digest, in
        order, and the set of digests that were new to the registry."""
        digests, inserted, _merged = self._insert_and_merge_in(session, records)
        return digests, inserted

    def _insert_and_merge_in(
        self, session: Session, records: Sequence[NewRecord]
    ) -> tuple[list[str], set[str], int]:
        """`insert_records_keyed_in`, and how many new measurements were merged into records
        already stored (or given twice)."""
        mod_sha = self._workload_digests(session, {r.workload_id for r in records})
        now = utc_now()
        digests: list[str] = []
        rows: dict[str, dict[str, Any]] = {}
        again: list[tuple[str, NewRecord]] = []  # a trace measured twice in this batch
        for record in records:
            digest = record_digest(mod_sha[record.workload_id], record)
            digests.append(digest)
            if digest in rows:
                again.append((digest, record))
                continue
            mean = mean_run_sec(record.run_secs, record.trace_valid)
            rows.setdefault(
                digest,
                {
                    "workload_id": record.workload_id,
                    "fingerprint_id": record.fingerprint_id,
                    "target": record.target,
                    "tvm_version": record.tvm_version,
                    "software": record.software,
                    "trace": record.trace,
                    "args_info": record.args_info,
                    "run_secs": None
                    if record.run_secs is None
                    else [float(v) for v in record.run_secs],
                    "mean_sec": mean,
                    "job_id": record.job_id,
                    "record_digest": digest,
                    "created_at": now,
                    "measurements": 1,
                    "valid_measurements": 0 if mean is None else 1,
                    "measurement_digest": measurement_digest(digest, record.run_secs),
                    "timing_context": record.timing_context,
                    "_record": record,
                },
            )
        # Sorted by the unique key: concurrent PostgreSQL writers then take index locks
        # in one order and wait for each other instead of deadlocking.
        ordered = [rows[d] for d in sorted(rows)]
        given = [(row["record_digest"], row.pop("_record")) for row in ordered]
        inserted = self._insert_rows(session, ordered)
        merged = self._merge_measurements(session, [(d, r) for d, r in given if d not in inserted] + again, now)
        return digests, inserted, merged

    def _insert_rows(self, session: Session, ordered: list[dict[str, Any]]) -> set[str]:
        """New records (digest-sorted rows) inside the caller's transaction; the digests new to
        the registry."""
        if self._dialect == "postgresql":
            return _insert_from_arrays(session, ordered)
        inserted: set[str] = set()
        # One statement with a parameter list: SQLAlchemy sends it as multi-row INSERTs
        # ("insertmanyvalues") compiled once, not one compile per distinct row count.
        stmt = (
            self.insert_statement(TuningRecordRow)
            .on_conflict_do_nothing(index_elements=["record_digest"])
            .returning(TuningRecordRow.record_digest)
        )
        connection = session.connection()
        for start in range(0, len(ordered), _INSERT_CHUNK):
            inserted.update(connection.execute(stmt, ordered[start : start + _INSERT_CHUNK]).scalars())
        return inserted

    def _merge_measurements(self, session: Session, measured: list[tuple[str, NewRecord]], now) -> int:
        """Merge measurements of records the registry already has (by record digest) into them,
        each measurement once; returns how many were new. Rare (a retune, a re-measured seed,
        an imported log), so the common report pays nothing for it."""
        if not measured:
            return 0
        stored = {
            digest: (record_id, first)
            for record_id, digest, first in session.execute(
                select(TuningRecordRow.id, TuningRecordRow.record_digest, TuningRecordRow.measurement_digest)
                .where(TuningRecordRow.record_digest.in_({d for d, _ in measured}))
            )
        }
        rows: dict[str, dict[str, Any]] = {}
        for digest, record in measured:
            record_id, first = stored[digest]
            key = measurement_digest(digest, record.run_secs)
            if key != first:
                rows.setdefault(key, {
                    "record_id": record_id,
                    "run_secs": None if record.run_secs is None else [float(v) for v in record.run_secs],
                    "mean_sec": mean_run_sec(record.run_secs, record.trace_valid),
                    "job_id": record.job_id,
                    "measurement_digest": key,
                    "created_at": now,
                })
        if not rows:
            return 0
        stmt = (
            self.insert_statement(TuningMeasurementRow)
            .on_conflict_do_nothing(index_elements=["measurement_digest"])
            .returning(TuningMeasurementRow.measurement_digest)
        )
        connection = session.connection()
        ordered = [rows[k] for k in sorted(rows)]
        new: set[str] = set()
        for start in range(0, len(ordered), _INSERT_CHUNK):
            new.update(connection.execute(stmt, ordered[start : start + _INSERT_CHUNK]).scalars())
        merged = sorted((row for row in ordered if row["measurement_digest"] in new), key=lambda r: r["record_id"])
        valid = [{"record_id": r["record_id"], "new_mean": r["mean_sec"]} for r in merged if r["mean_sec"] is not None]
        failed = [{"record_id": r["record_id"]} for r in merged if r["mean_sec"] is None]
        if valid:
            connection.execute(_MERGE_VALID, valid)
        if failed:
            connection.execute(_MERGE_FAILED, failed)
        return len(merged)

    def _workload_digests(self, session: Session, workload_ids: set[int]) -> dict[int, str]:
        found = dict(
            session.execute(
                select(WorkloadRow.id, WorkloadRow.mod_sha256).where(WorkloadRow.id.in_(workload_ids))
            ).all()
        )
        missing = workload_ids - set(found)
        if missing:
            raise RegistryError(
                f"tuning records name workloads {sorted(missing)} "
                f"that the registry at {self.url} does not have",
                "commit the workload first; nothing was written",
            )
        return found

    def _record_query(
        self,
        workload_id: int | Iterable[int] | None,
        fingerprint_id: str | None,
        target: str | None,
        tvm_version: str | None,
        timing_context: str | None = None,
    ) -> Select[tuple[TuningRecordRow]]:
        query = select(TuningRecordRow)
        if workload_id is not None:
            ids = [workload_id] if isinstance(workload_id, int) else list(workload_id)
            query = query.where(TuningRecordRow.workload_id.in_(ids))
        if fingerprint_id is not None:
            query = query.where(TuningRecordRow.fingerprint_id == fingerprint_id)
        if target is not None:
            query = query.where(TuningRecordRow.target == target)
        if tvm_version is not None:
            query = query.where(TuningRecordRow.tvm_version == tvm_version)
        if timing_context is not None:
            query = query.where(TuningRecordRow.timing_context == timing_context)
        return query

    def context_to_rank(
        self, workload_id: int | Iterable[int], fingerprint_id: str, target: str, tvm_version: str, preferred: str
    ) -> str:
        """The one timing context a workload's records are ranked in (times of two contexts do not
        compare): ``preferred`` (the reader's) where it has a valid record, else the context with the
        most (warm on a tie: every record before contexts were kept), else ``preferred``."""
        query = (
            self._record_query(workload_id, fingerprint_id, target, tvm_version)
            .where(TuningRecordRow.mean_sec.is_not(None))
            .with_only_columns(TuningRecordRow.timing_context, func.count())
            .group_by(TuningRecordRow.timing_context)
        )
        with self._unit.read() as session:
            counts: dict[str, int] = dict(session.execute(query).all())
        if not counts or counts.get(preferred):
            return preferred
        return max(counts, key=lambda c: (counts[c], c == WARM_CONTEXT, c))

    def top_k_records(
        self,
        workload_id: int | Iterable[int],
        fingerprint_id: str,
        target: str,
        tvm_version: str,
        k: int,
        timing_context: str | None = None,
    ) -> list[StoredRecord]:
        """The k fastest valid records (of one ``timing_context``: None, any); ties keep the order
        they were stored in, as TVM does."""
        if k <= 0:
            return []
        query = (
            self._record_query(workload_id, fingerprint_id, target, tvm_version, timing_context)
            .where(TuningRecordRow.mean_sec.is_not(None))
            .order_by(TuningRecordRow.mean_sec, TuningRecordRow.id)
            .limit(k)
        )
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]

    def measurements_of(self, record_id: int) -> list[Measurement]:
        """Every measurement of a record, the first first."""
        with self._unit.read() as session:
            record = session.get(TuningRecordRow, record_id)
            if record is None:
                return []
            # A trace MetaSchedule rejects has no valid measurement, whatever its times.
            first_mean = mean_run_sec(record.run_secs, trace_valid=record.valid_measurements > 0)
            first = [Measurement(record.run_secs, first_mean, record.job_id)]
            later = session.execute(
                select(TuningMeasurementRow.run_secs, TuningMeasurementRow.mean_sec, TuningMeasurementRow.job_id)
                .where(TuningMeasurementRow.record_id == record_id).order_by(TuningMeasurementRow.id)
            ).all()
            return first + [Measurement(run_secs, mean, job_id) for run_secs, mean, job_id in later]

    def measured_counts(
        self, workload_ids: Iterable[int], fingerprint_id: str, target: str, tvm_version: str,
        timing_context: str | None = None,
    ) -> dict[int, int]:
        """Valid measured records per workload in the scope (of one ``timing_context``: None, any;
        workloads with none are left out); each workload is one range of the scope index."""
        ids = sorted(set(workload_ids))
        if not ids:
            return {}
        query = (
            self._record_query(ids, fingerprint_id, target, tvm_version, timing_context)
            .where(TuningRecordRow.mean_sec.is_not(None))
            .with_only_columns(TuningRecordRow.workload_id, func.count())
            .group_by(TuningRecordRow.workload_id)
        )
        with self._unit.read() as session:
            return dict(session.execute(query).all())

    def all_records(
        self,
        workload_id: int | Iterable[int] | None = None,
        fingerprint_id: str | None = None,
        target: str | None = None,
        tvm_version: str | None = None,
    ) -> list[StoredRecord]:
        """Every record in the scope, valid or not, in the order they were stored.

        (Records of one `add_tuning_records` call are stored in digest order.)
        """
        query = self._record_query(workload_id, fingerprint_id, target, tvm_version).order_by(
            TuningRecordRow.id
        )
        with self._unit.read() as session:
            return [r.to_entity() for r in session.scalars(query)]

    def job_measurements(self, job_id: str) -> list[tuple[int, float | None]]:
        """(workload id, mean seconds or None when it failed) of every record a job measured,
        in the order they were stored: what `farm report` plots. Scans the table (no index on
        job_id: reports are rare)."""
        query = (select(TuningRecordRow.workload_id, TuningRecordRow.mean_sec)
                 .where(TuningRecordRow.job_id == job_id).order_by(TuningRecordRow.id))
        with self._unit.read() as session:
            return [(workload_id, mean_sec) for workload_id, mean_sec in session.execute(query)]

    def count_records(
        self,
        workload_id: int | Iterable[int] | None = None,
        fingerprint_id: str | None = None,
        target: str | None = None,
        tvm_version: str | None = None,
    ) -> int:
        inner = self._record_query(
            workload_id, fingerprint_id, target, tvm_version
        ).with_only_columns(TuningRecordRow.id)
        with self._unit.read() as session:
            return session.scalar(select(func.count()).select_from(inner.subquery())) or 0


def _with_workload(record: NewRecord, workload_id: int) -> NewRecord:
    return replace(record, workload_id=workload_id)
