"""A MetaSchedule database backed by the registry, scoped to one fingerprint, target and TVM."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import tvm
import tvm_ffi
from tvm.ir import IRModule
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase, TuningRecord, Workload
from tvm.target import Target

from foundation.errors import FarmError
from foundation.meta_schedule.database.record_replay import UnusableRecord, replayed_record, stored_record_json
from foundation.meta_schedule.database.record_to_json import tuning_record_json
from foundation.registry.entities import NewRecord, StoredRecord
from foundation.registry.reported_records import canonical_json, new_record_from
from foundation.registry.store import RegistryStore

# Records are written in batches of this many; a killed agent loses at most one batch.
DEFAULT_FLUSH_EVERY = 16

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _keeps_farm_error(method: _Method) -> _Method:
    """A method MetaSchedule calls through TVM, which hands an exception raised in it back to the
    caller of ``ms.tune_tasks`` as a RuntimeError of its text alone: the farm's own error (a full
    registry disk is exit 6, not an internal error) is kept in ``farm_error`` for the tuner to
    raise again (foundation.meta_schedule.tuner)."""

    @functools.wraps(method)
    def keeping(self, *args: Any) -> Any:
        try:
            return method(self, *args)
        except FarmError as err:
            self.farm_error = err
            raise

    return keeping  # type: ignore[return-value]


_LOG = logging.getLogger(__name__)


def canonical_target_json(target: Target | Mapping[str, Any] | str) -> str:
    """The target as the registry keys it: TVM's exported config, canonically spelled."""
    if isinstance(target, str):
        try:
            target = json.loads(target)
        except json.JSONDecodeError:
            pass
    if not isinstance(target, Target):
        target = Target(target)
    return canonical_json(target.export())


def trace_is_valid(record: TuningRecord) -> bool:
    """MetaSchedule's rule: some instruction must come before post-processing starts."""
    insts = record.trace.insts
    return len(insts) > 0 and insts[0].kind.name != "EnterPostproc"


def workload_json(mod: IRModule) -> str:
    """How the registry stores a workload: MetaSchedule's ``Workload.as_json()``, canonical."""
    return canonical_json(Workload(mod).as_json())


def module_json(stored_workload_json: str) -> str:
    """The IRModule of a stored workload as ``tvm.ir.save_json`` text (what agents load)."""
    return tvm.ir.save_json(Workload.from_json(json.loads(stored_workload_json)).mod)


@derived_object
class RegistryDatabase(PyDatabase):
    """MetaSchedule's database interface over `RegistryStore`.

    Reads see only records of this fingerprint, target and TVM version (records from any
    job, so a new job starts warm). Writes are tagged with ``job_id`` and buffered up to
    ``flush_every`` records, and written at the end of every measured batch (`end_of_batch`);
    every read flushes first, so the database always sees its own writes. Call ``flush()``
    when tuning ends.

    The query_* methods are MetaSchedule's own (has_workload + get_top_k(1) + replaying the
    trace), which call back into this class. A stored record whose trace does not replay on its
    workload (one filed before reports were checked) is left out of every read, logged once and
    counted in ``unusable``: the next best is read instead, so no build or plan fails on it.
    """

    def __init__(
        self,
        store: RegistryStore,
        fingerprint_id: str,
        target: Target | str,
        tvm_version: str | None = None,
        software: dict[str, Any] | None = None,
        job_id: str | None = None,
        flush_every: int = DEFAULT_FLUSH_EVERY,
    ):
        super().__init__()
        self.store = store
        self.fingerprint_id = fingerprint_id
        # A string is taken as already canonical, as the coordinator computed it.
        self.target_json = target if isinstance(target, str) else canonical_target_json(target)
        self.tvm_version = tvm_version or tvm.__version__
        self.software = dict(software or {})
        self.job_id = job_id
        self.flush_every = max(1, flush_every)
        self._record_target = Target(json.loads(self.target_json))
        self._pending: list[NewRecord] = []
        # shash -> [(workload id, Workload)] as stored; parsed once per process.
        self._by_shash: dict[str, list[tuple[int, Workload]]] = {}
        self._by_id: dict[int, Workload] = {}
        self._tuning_records: dict[int, TuningRecord] = {}
        # The last FarmError a method raised into TVM (`_keeps_farm_error`).
        self.farm_error: FarmError | None = None
        self.unusable: set[int] = set()  # ids of stored records whose trace does not replay
        # The cache state each workload's records are filed and ranked under, by workload id: what
        # the tuner times it in (time_tasks_in), else what a tune on this fingerprint would
        # (default_timing_context).
        self._contexts: dict[int, str] = {}
        self._default_context: Callable[[IRModule], str] | None = None

    # -- workloads -------------------------------------------------------------------

    def _load(self, shash: str) -> list[tuple[int, Workload]]:
        candidates = []
        for workload_id, mod_json in self.store.records.find_workloads(shash):
            if workload_id not in self._by_id:
                self._by_id[workload_id] = Workload.from_json(json.loads(mod_json))
            candidates.append((workload_id, self._by_id[workload_id]))
        self._by_shash[shash] = candidates
        return candidates

    def _matching_ids(self, mod: IRModule) -> list[int]:
        """Ids of stored workloads structurally equal to ``mod``, oldest first."""
        shash = str(tvm_ffi.structural_hash(mod))
        candidates = self._by_shash.get(shash)
        cached = candidates is not None
        ids = self._equal_ids(candidates if cached else self._load(shash), mod)
        if not ids and cached:
            # Another process may have committed the workload since we last looked.
            ids = self._equal_ids(self._load(shash), mod)
        return ids

    @staticmethod
    def _equal_ids(candidates: list[tuple[int, Workload]], mod: IRModule) -> list[int]:
        return [
            i for i, w in candidates if w.mod.same_as(mod) or tvm_ffi.structural_equal(w.mod, mod)
        ]

    def _workload_id(self, workload: Workload) -> int:
        ids = self._matching_ids(workload.mod)
        return ids[0] if ids else self._commit(workload)

    def _commit(self, workload: Workload) -> int:
        shash = str(tvm_ffi.structural_hash(workload.mod))
        workload_id = self.store.records.commit_workload(shash, canonical_json(workload.as_json()))
        self._by_id.setdefault(workload_id, workload)
        candidates = self._by_shash.setdefault(shash, [])
        if all(i != workload_id for i, _ in candidates):
            candidates.append((workload_id, self._by_id[workload_id]))
        return workload_id

    @_keeps_farm_error
    def has_workload(self, mod: IRModule) -> bool:
        return bool(self._matching_ids(mod))

    @_keeps_farm_error
    def commit_workload(self, mod: IRModule) -> Workload:
        ids = self._matching_ids(mod)
        if ids:
            return self._by_id[ids[0]]
        workload = Workload(mod)
        return self._by_id[self._commit(workload)]

    # -- timing contexts ---------------------------------------------------------------

    def time_tasks_in(self, mods: Sequence[IRModule], timing_contexts: Sequence[str]) -> None:
        """The tuner times the candidates of task ``mods[i]`` in ``timing_contexts[i]``: its records
        are filed, and ranked, under it."""
        for mod, context in zip(mods, timing_contexts):
            for workload_id in self._matching_ids(mod) or [self._commit(Workload(mod))]:
                self._contexts[workload_id] = context

    def timing_context_of(self, workload_id: int, mod: IRModule) -> str:
        """The context the records of ``workload_id`` (whose IRModule is ``mod``) are filed under and
        read in."""
        context = self._contexts.get(workload_id)
        if context is None:
            if self._default_context is None:
                self._default_context = default_timing_context(self.store, self.fingerprint_id, self._record_target)
            context = self._contexts[workload_id] = self._default_context(mod)
        return context

    def _ranked_context(self, ids: list[int], mod: IRModule) -> str:
        """The one context the records of ``ids`` (one workload's) are ranked in: this reader's, else
        the one that has records (TuningRecords.context_to_rank)."""
        return self.store.records.context_to_rank(ids, self.fingerprint_id, self.target_json, self.tvm_version,
                                                  self.timing_context_of(ids[0], mod))

    # -- records ---------------------------------------------------------------------

    @_keeps_farm_error
    def commit_tuning_record(self, record: TuningRecord) -> None:
        workload_id = self._workload_id(record.workload)
        self._pending.append(
            new_record_from(
                tuning_record_json(record),
                workload_id=workload_id,
                fingerprint_id=self.fingerprint_id,
                target_json=self.target_json,
                tvm_version=self.tvm_version,
                software=self.software,
                job_id=self.job_id,
                timing_context=self.timing_context_of(workload_id, record.workload.mod),
            )
        )
        if len(self._pending) >= self.flush_every:
            self.flush()

    def end_of_batch(self) -> None:
        """MetaSchedule committed a measured batch (foundation.meta_schedule.tuner): write it now,
        so that a tune killed later keeps it."""
        self.flush()

    def flush(self) -> int:
        """Write buffered records; returns how many were new to the registry."""
        if not self._pending:
            return 0
        pending, self._pending = self._pending, []
        try:
            return self.store.records.add_tuning_records(pending)
        except BaseException:
            # Kept for the next flush: a registry hiccup must not drop measurements.
            self._pending = pending + self._pending
            raise

    def _tuning_record(self, stored: StoredRecord) -> TuningRecord | None:
        """The stored record as MetaSchedule's, or None when its trace does not replay on its workload."""
        if stored.id in self.unusable:
            return None
        record = self._tuning_records.get(stored.id)
        if record is None:
            workload = self._by_id.get(stored.workload_id)
            if workload is None:
                _shash, mod_json = self.store.records.get_workloads([stored.workload_id])[
                    stored.workload_id
                ]
                workload = self._by_id.setdefault(
                    stored.workload_id, Workload.from_json(json.loads(mod_json))
                )
            try:
                record = replayed_record(stored_record_json(stored), workload)
            except UnusableRecord as unusable:
                self.unusable.add(stored.id)
                _LOG.warning("tuning record %d of workload %d is left out: %s (`farm registry forget --record %d "
                             "--fingerprint %s` removes it)", stored.id, stored.workload_id, unusable.reason,
                             stored.id, stored.fingerprint_id)
                return None
            self._tuning_records[stored.id] = record
        return record

    def _usable(self, stored: list[StoredRecord]) -> list[TuningRecord]:
        return [r for r in map(self._tuning_record, stored) if r is not None]

    @_keeps_farm_error
    def get_top_k(self, workload: Workload, top_k: int) -> list[TuningRecord]:
        if top_k < 0:
            raise ValueError("top_k must be non-negative")
        self.flush()
        ids = self._matching_ids(workload.mod)
        if not ids or top_k == 0:
            return []
        context = self._ranked_context(ids, workload.mod)
        wanted = top_k
        while True:
            stored = self.store.records.top_k_records(
                ids, self.fingerprint_id, self.target_json, self.tvm_version, wanted, context
            )
            usable = self._usable(stored)
            if len(usable) >= top_k or len(stored) < wanted:
                return usable[:top_k]
            # Unusable records took places: as many more, each of them now known and skipped.
            wanted = top_k + len(stored) - len(usable)

    @_keeps_farm_error
    def get_all_tuning_records(self) -> list[TuningRecord]:
        self.flush()
        stored = self.store.records.all_records(
            fingerprint_id=self.fingerprint_id,
            target=self.target_json,
            tvm_version=self.tvm_version,
        )
        missing = {s.workload_id for s in stored} - set(self._by_id)
        for workload_id, (_shash, mod_json) in self.store.records.get_workloads(missing).items():
            self._by_id[workload_id] = Workload.from_json(json.loads(mod_json))
        return self._usable(stored)

    def measured_count(self, mod: IRModule) -> int:
        """Valid measured records of ``mod``'s workload in this scope, of the context they are ranked
        in: what a job may reuse (foundation.meta_schedule.reuse). Measured records only, whatever
        seeds the search."""
        self.flush()
        ids = self._matching_ids(mod)
        if not ids:
            return 0
        counts = self.store.records.measured_counts(ids, self.fingerprint_id, self.target_json, self.tvm_version,
                                                    self._ranked_context(ids, mod))
        return sum(counts.values())

    @_keeps_farm_error
    def __len__(self) -> int:
        self.flush()
        return self.store.records.count_records(
            fingerprint_id=self.fingerprint_id,
            target=self.target_json,
            tvm_version=self.tvm_version,
        )


def default_timing_context(store: RegistryStore, fingerprint_id: str, target: Target) -> Callable[[IRModule], str]:
    """Each task's timing context as a tune on ``fingerprint_id`` would time it (MeasureSettings'
    rule): the context asked for here, else the one its pack chose, per task as its weights and the
    fingerprint's L2 say; warm on a GPU."""
    from foundation.domain.timing_context import TimingContext, task_timing
    from foundation.meta_schedule.timing_context import buffer_roles, l2_kib_of, timing_context_here

    requested = timing_context_here(fingerprint_id).context if target.kind.name == "llvm" else TimingContext.WARM
    if requested is TimingContext.WARM:
        return lambda _mod: TimingContext.WARM.value
    fingerprint = store.get_fingerprint(fingerprint_id)
    l2_kib = l2_kib_of(fingerprint.details) if fingerprint is not None else None

    def context_of(mod: IRModule) -> str:
        if "main" not in {gv.name_hint for gv in mod.get_global_vars()}:
            return TimingContext.WARM.value  # not a tuning task's form (an imported log's): its roles are unknown
        return task_timing(requested, buffer_roles(mod), l2_kib).context.value

    return context_of


def tvm_database_for(
    store: RegistryStore,
    fingerprint_id: str,
    target_json: str,
    tvm_version: str,
    software: dict[str, Any],
    job_id: str | None = None,
    flush_every: int = DEFAULT_FLUSH_EVERY,
) -> RegistryDatabase:
    """The MetaSchedule database a tuning run (or a build applying its results) should use."""
    return RegistryDatabase(
        store, fingerprint_id, target_json, tvm_version, software, job_id, flush_every
    )
