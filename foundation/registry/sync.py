"""Copy what one registry knows into another: only what the destination lacks, safe to kill.

What travels: fingerprints, models, finished jobs, workloads, tuning records with every
measurement, cost models and artifacts (their bytes checked against their sha256 on both ends).
Each row is keyed by what it is, never by a local id: fingerprints and models by their ids
(digests of what they describe), workloads by their module's sha256, records by their record
digest, measurements by their measurement digest, jobs and artifacts by their ids. Records go
through the registry's own write path, so a trace measured on both sides merges as any
re-measurement does, and the same numbers sent twice count once.

Parents are written before their children, each batch in one transaction: a sync killed at
any point leaves the destination consistent (every row it holds is whole, every reference
resolves), and the next sync finishes the copy. A second sync of the same pair copies nothing.
Records of another TVM version travel too; the registry never serves them as hits.

A sync given a ``check`` (the CLI's into a registry or pack, a coordinator's ImportPack) refuses
the records that arrive poisoned: times no call of a kernel takes (foundation.domain.measured_times)
or, as the check says, a trace that does not replay on the workload it is filed under. A refused
record is not stored, counted in ``skipped["refused_records"]``, and the first reason kept; the
rest of the sync goes on. It stays missing, so the next sync refuses it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import func, select

from foundation.domain.jobs import FINAL_STATES
from foundation.domain.measured_times import implausible_times
from foundation.errors import NotFound, RegistryError
from foundation.registry.entities import NewRecord
from foundation.registry.schema import (
    ArtifactRow,
    Base,
    CostModelRow,
    FingerprintRow,
    JobRow,
    ModelRow,
    TuningMeasurementRow,
    TuningRecordRow,
    WorkloadRow,
)
from foundation.registry.session import Changes
from foundation.registry.store import RegistryStore, target_kind_of
from foundation.registry.tuning_records import mean_run_sec

# Records copied per transaction: small enough that a kill loses little, large enough that a
# PostgreSQL round trip is not paid per record.
RECORD_BATCH = 500


@dataclass(frozen=True)
class SyncFilter:
    """What to copy: everything, or the rows of one fingerprint, model (by name) or target."""

    fingerprint: str | None = None
    model: str | None = None
    # A target kind ("llvm", "cuda") or one canonical target's JSON text.
    target: str | None = None
    # Libraries too (a pack for git may leave them out: records rebuild them in a minute).
    artifacts: bool = True

    def takes_target(self, target: str) -> bool:
        if self.target is None:
            return True
        return target == self.target or (not self.target.lstrip().startswith("{")
                                         and target_kind_of(target) == self.target)


@dataclass
class SyncCounts:
    """What a sync copied (or, dry, would copy), per kind of row."""

    fingerprints: int = 0
    models: int = 0
    jobs: int = 0
    workloads: int = 0
    records: int = 0
    measurements: int = 0
    cost_models: int = 0
    artifacts: int = 0
    artifact_bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    refused_reason: str | None = None  # why the first refused record was (skipped["refused_records"])

    def to_json(self) -> dict[str, Any]:
        counts = asdict(self)
        if counts["refused_reason"] is None:  # nothing refused: the counts alone
            del counts["refused_reason"]
        return counts


Progress = Callable[[str, int, int], None]  # (what, done, of)
# Why a record arriving may not be stored, or None: (its workload's module JSON, the record's row as
# _record_json gives it). The registry needs no TVM: a caller that can replay a trace passes one
# (foundation.meta_schedule.database.record_replay.ArrivingRecordCheck).
RecordCheck = Callable[[str, dict[str, Any]], str | None]


def sync_registries(source: RegistryStore, destination: RegistryStore, only: SyncFilter = SyncFilter(), *,
                    dry_run: bool = False, progress: Progress | None = None,
                    check: RecordCheck | None = None) -> SyncCounts:
    """Copy into ``destination`` what ``source`` holds and it lacks (``only`` what the filter takes);
    with a ``check``, records with implausible times or that it refuses are left out and counted."""
    return _Sync(source, destination, only, dry_run, progress or (lambda what, done, of: None), check).run()


class _Sync:
    def __init__(self, source: RegistryStore, destination: RegistryStore, only: SyncFilter, dry_run: bool,
                 progress: Progress, check: RecordCheck | None = None):
        if source is destination or (source.url == destination.url and source.url != "sqlite://"):
            raise RegistryError(f"FROM and TO are the same registry ({source.url})", "name two registries")
        self.source, self.destination, self.only, self.dry_run, self.progress = (
            source, destination, only, dry_run, progress)
        self.check = check
        self.counts = SyncCounts()

    def run(self) -> SyncCounts:
        models = self._model_ids()
        if self.only.fingerprint and not self._rows(FingerprintRow, FingerprintRow.id == self.only.fingerprint):
            raise NotFound(f"the registry at {self.source.url} has no fingerprint {self.only.fingerprint!r}",
                           "`farm registry ls` lists the fingerprints it holds")
        artifacts = self._artifact_rows(models)
        jobs = self._job_rows(models)
        # An artifact's job travels with it, whatever the filters left out.
        wanted_jobs = {a["job_id"] for a in artifacts if a["job_id"]} - {j["id"] for j in jobs}
        jobs += self._rows(JobRow, JobRow.id.in_(wanted_jobs)) if wanted_jobs else []
        fingerprints = ({self.only.fingerprint} if self.only.fingerprint
                        else {r["id"] for r in self._rows(FingerprintRow)})
        fingerprints |= {j["fingerprint_id"] for j in jobs if j["fingerprint_id"]}
        fingerprints |= {a["fingerprint_id"] for a in artifacts}
        self.counts.fingerprints = self._copy_rows(
            FingerprintRow, self._rows(FingerprintRow, FingerprintRow.id.in_(fingerprints)))
        model_ids = set(models) if models is not None else {r["id"] for r in self._rows(ModelRow)}
        model_ids |= {j["model_id"] for j in jobs} | {a["model_id"] for a in artifacts}
        self.counts.models = self._copy_rows(ModelRow, self._rows(ModelRow, ModelRow.id.in_(model_ids)))
        self.counts.jobs = self._copy_rows(JobRow, jobs)
        model_jobs = None if models is None else {j["id"] for j in self._rows(JobRow, JobRow.model_id.in_(models))}
        self._copy_records(model_jobs)
        self._copy_cost_models()
        self._copy_artifacts(artifacts)
        return self.counts

    # -- reading the source ----------------------------------------------------------

    def _rows(self, row_class: type[Base], *where: Any) -> list[dict[str, Any]]:
        """The source's rows of ``row_class`` as column dicts (deferred blobs left out)."""
        columns = [c for c in row_class.__table__.columns if c.name not in ("library", "blob")]
        with self.source.unit_of_work.read() as session:
            return [dict(zip((c.name for c in columns), row, strict=True))
                    for row in session.execute(select(*columns).where(*where))]

    def _model_ids(self) -> set[str] | None:
        if self.only.model is None:
            return None
        ids = {r["id"] for r in self._rows(ModelRow, ModelRow.name == self.only.model)}
        if not ids:
            raise NotFound(f"the registry at {self.source.url} has no model {self.only.model!r}",
                                "`farm registry ls` lists the models it holds")
        return ids

    def _scoped(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if (self.only.fingerprint is None or r["fingerprint_id"] == self.only.fingerprint)
                and self.only.takes_target(r["target"])]

    def _job_rows(self, models: set[str] | None) -> list[dict[str, Any]]:
        where = [JobRow.state.in_(FINAL_STATES)] + ([JobRow.model_id.in_(models)] if models is not None else [])
        return self._scoped(self._rows(JobRow, *where))

    def _artifact_rows(self, models: set[str] | None) -> list[dict[str, Any]]:
        if not self.only.artifacts:
            return []
        where = [ArtifactRow.model_id.in_(models)] if models is not None else []
        return self._scoped(self._rows(ArtifactRow, *where))

    # -- writing the destination -----------------------------------------------------

    def _copy_rows(self, row_class: type[Base], rows: list[dict[str, Any]]) -> int:
        """Insert the rows the destination lacks (by primary key); how many it lacked."""
        if not rows:
            return 0
        key = row_class.__table__.primary_key.columns.values()[0]
        with self.destination.unit_of_work.read() as session:
            have = set(session.scalars(select(key).where(key.in_([r[key.name] for r in rows]))))
        missing = [r for r in rows if r[key.name] not in have]
        if missing and not self.dry_run:
            statement = self.destination.insert_statement(row_class).on_conflict_do_nothing(index_elements=[key.name])
            with self.destination.unit_of_work.write(Changes.STATE) as session:
                session.execute(statement, missing)
        self.progress(row_class.__tablename__, len(missing), len(rows))
        return len(missing)

    def _copy_records(self, job_ids: set[str] | None) -> None:
        where: list[Any] = []
        if self.only.fingerprint:
            where.append(TuningRecordRow.fingerprint_id == self.only.fingerprint)
        if job_ids is not None:
            where.append(TuningRecordRow.job_id.in_(job_ids))
        with self.source.unit_of_work.read() as session:
            total = session.scalar(select(func.count()).select_from(TuningRecordRow).where(*where)) or 0
        done, after = 0, 0
        while True:
            with self.source.unit_of_work.read() as session:
                batch = list(session.scalars(select(TuningRecordRow).where(TuningRecordRow.id > after, *where)
                                             .order_by(TuningRecordRow.id).limit(RECORD_BATCH)))
                if not batch:
                    break
                after = batch[-1].id
                records = [_record_json(r) for r in batch if self.only.takes_target(r.target)]
                extra = self._extra_measurements(session, [r["id"] for r in records])
                workloads = self._workloads(session, {r["workload_id"] for r in records})
            self._copy_record_batch(records, extra, workloads)
            done += len(batch)
            self.progress("tuning_records", done, total)

    def _extra_measurements(self, session: Any, record_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        by_record: dict[int, list[dict[str, Any]]] = {}
        query = (select(TuningMeasurementRow).where(TuningMeasurementRow.record_id.in_(record_ids))
                 .order_by(TuningMeasurementRow.id))
        for m in session.scalars(query):
            by_record.setdefault(m.record_id, []).append({"run_secs": m.run_secs, "job_id": m.job_id})
        return by_record

    def _workloads(self, session: Any, ids: set[int]) -> dict[int, tuple[str, str, str]]:
        query = select(WorkloadRow.id, WorkloadRow.shash, WorkloadRow.mod_json, WorkloadRow.mod_sha256)
        return {i: (shash, mod, sha) for i, shash, mod, sha in session.execute(query.where(WorkloadRow.id.in_(ids)))}

    def _copy_record_batch(self, records: list[dict[str, Any]], extra: dict[int, list[dict[str, Any]]],
                           workloads: dict[int, tuple[str, str, str]]) -> None:
        """One transaction: the batch's workloads, then its records and measurements the destination lacks."""
        if not records:
            return
        with self.destination.unit_of_work.read() as session:
            known_workloads = set(session.scalars(select(WorkloadRow.mod_sha256).where(
                WorkloadRow.mod_sha256.in_([sha for _, _, sha in workloads.values()]))))
            stored = dict(session.execute(select(TuningRecordRow.record_digest, TuningRecordRow.measurements).where(
                TuningRecordRow.record_digest.in_([r["record_digest"] for r in records]))).all())
        # A record the destination holds with as many measurements is already there: skipped whole.
        wanted = [r for r in records if stored.get(r["record_digest"], 0) < 1 + len(extra.get(r["id"], []))]
        if self.check is not None:
            wanted = [r for r in wanted if not self._refused(r, extra.get(r["id"], []), workloads[r["workload_id"]][1])]
        fresh_workloads = {r["workload_id"] for r in wanted if workloads[r["workload_id"]][2] not in known_workloads}
        self.counts.workloads += len(fresh_workloads)
        if not wanted:
            return
        order = sorted({r["workload_id"] for r in wanted})
        index = {w: i for i, w in enumerate(order)}
        new: list[NewRecord] = []
        for r in wanted:
            for measured in [{"run_secs": r["run_secs"], "job_id": r["job_id"]}, *extra.get(r["id"], [])]:
                new.append(NewRecord(
                    workload_id=index[r["workload_id"]], fingerprint_id=r["fingerprint_id"], target=r["target"],
                    tvm_version=r["tvm_version"], trace=r["trace"], run_secs=measured["run_secs"],
                    args_info=r["args_info"], software=r["software"], job_id=measured["job_id"],
                    trace_valid=r["trace_valid"], timing_context=r["timing_context"]))
        if self.dry_run:
            self.counts.records += sum(1 for r in wanted if r["record_digest"] not in stored)
            self.counts.measurements += sum(len(extra.get(r["id"], [])) for r in wanted)
            return
        self._need_fingerprints({r["fingerprint_id"] for r in wanted})
        _ids, inserted, merged = self.destination.records.import_tuning_log(
            [(workloads[w][0], workloads[w][1]) for w in order], new)
        self.counts.records += inserted
        self.counts.measurements += merged

    def _refused(self, record: dict[str, Any], extra: list[dict[str, Any]], mod_json: str) -> bool:
        """Whether ``record`` is refused (counted, its reason kept if it is the first)."""
        assert self.check is not None
        reason = None
        for measured in [record, *extra]:
            # The floor of any kernel's call: a registry row does not say its workload's FLOPs.
            reason = reason or implausible_times(measured["run_secs"], 0.0)
        # A trace MetaSchedule already refused (no mean time) is data, never served: kept as it is.
        if reason is None and record["trace_valid"]:
            reason = self.check(mod_json, record)
        if reason is None:
            return False
        self.counts.skipped["refused_records"] = self.counts.skipped.get("refused_records", 0) + 1
        if self.counts.refused_reason is None:
            self.counts.refused_reason = f"record {record['record_digest'][:12]}: {reason}"
        return True

    def _need_fingerprints(self, ids: set[str]) -> None:
        """Copy the fingerprints records name (a filter on models or targets may have left them out)."""
        with self.destination.unit_of_work.read() as session:
            have = set(session.scalars(select(FingerprintRow.id).where(FingerprintRow.id.in_(ids))))
        if ids - have:
            self.counts.fingerprints += self._copy_rows(FingerprintRow,
                                                        self._rows(FingerprintRow, FingerprintRow.id.in_(ids - have)))

    def _copy_cost_models(self) -> None:
        """A fingerprint's cost model travels where the destination has none of that TVM version and kind
        (a model of its own, trained on its own records, is never replaced by another registry's)."""
        where = [CostModelRow.fingerprint_id == self.only.fingerprint] if self.only.fingerprint else []
        if self.only.target is not None or self.only.model is not None:
            return  # a cost model is a fingerprint's, across models and targets: only whole or per fingerprint
        for row in self._rows(CostModelRow, *where):
            if self.destination.cost_models.find(row["fingerprint_id"], row["tvm_version"], row["kind"]) is not None:
                continue
            self.counts.cost_models += 1
            if self.dry_run:
                continue
            with self.source.unit_of_work.read() as session:
                blob = session.scalar(select(CostModelRow.blob).where(CostModelRow.id == row["id"]))
            if blob is None or hashlib.sha256(blob).hexdigest() != row["sha256"]:
                self.counts.cost_models -= 1
                self.counts.skipped["damaged_cost_models"] = self.counts.skipped.get("damaged_cost_models", 0) + 1
                continue
            self._need_fingerprints({row["fingerprint_id"]})
            # It learned the records synced with it: the next refresh starts after them.
            with self.destination.unit_of_work.read() as session:
                last = session.scalar(select(func.max(TuningRecordRow.id)).where(
                    TuningRecordRow.fingerprint_id == row["fingerprint_id"],
                    TuningRecordRow.tvm_version == row["tvm_version"])) or 0
            self.destination.cost_models.save(row["fingerprint_id"], row["tvm_version"], row["kind"], bytes(blob),
                                              last, row["samples"], row["workloads"])
        self.progress("cost_models", self.counts.cost_models, self.counts.cost_models)

    def _copy_artifacts(self, artifacts: list[dict[str, Any]]) -> None:
        """Each artifact in its own transaction, its bytes checked against its sha256 as read from the
        source and as read back from the destination."""
        with self.destination.unit_of_work.read() as session:
            have = set(session.scalars(select(ArtifactRow.id).where(ArtifactRow.id.in_([a["id"] for a in artifacts]))))
        missing = [a for a in artifacts if a["id"] not in have]
        for done, artifact in enumerate(missing, start=1):
            library = self.source.get_artifact_library(artifact["id"])
            if hashlib.sha256(library).hexdigest() != artifact["sha256"]:
                self.counts.skipped["damaged_artifacts"] = self.counts.skipped.get("damaged_artifacts", 0) + 1
                continue
            self.counts.artifacts += 1
            self.counts.artifact_bytes += len(library)
            if not self.dry_run:
                statement = self.destination.insert_statement(ArtifactRow).on_conflict_do_nothing(
                    index_elements=["id"])
                with self.destination.unit_of_work.write(Changes.STATE) as session:
                    session.execute(statement, [{**artifact, "library": library}])
                copied = self.destination.get_artifact_library(artifact["id"])
                if hashlib.sha256(copied).hexdigest() != artifact["sha256"]:
                    self.destination.invalidate_artifact(artifact["id"], "its bytes changed on the way in a sync")
                    raise RegistryError(f"artifact {artifact['id']} arrived damaged in {self.destination.url}",
                                        "it was marked invalid there; run the sync again")
            self.progress("artifacts", done, len(missing))


def _record_json(row: TuningRecordRow) -> dict[str, Any]:
    # A record whose times were fine but whose trace MetaSchedule refused has no mean: keep that.
    refused_trace = row.mean_sec is None and mean_run_sec(row.run_secs, True) is not None
    return {"id": row.id, "workload_id": row.workload_id, "fingerprint_id": row.fingerprint_id, "target": row.target,
            "tvm_version": row.tvm_version, "software": row.software, "trace": row.trace, "args_info": row.args_info,
            "run_secs": row.run_secs, "job_id": row.job_id, "record_digest": row.record_digest,
            "trace_valid": not refused_trace, "timing_context": row.timing_context}
