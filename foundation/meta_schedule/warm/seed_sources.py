"""Which stored schedules may seed a job's tasks: same fused-operator structure, nearest first.

For each task, the donors are the best records of workloads with the task's structure
(foundation.meta_schedule.warm.structure): this fingerprint's first, then other fingerprints
of the same target kind, nearest first (foundation.domain.fingerprint_nearness), and within
a fingerprint the nearest shapes first. A task whose own workload already has records on this
fingerprint gets none: MetaSchedule's search starts from those (`get_top_k`).
A donor is only a candidate: it is transplanted and checked (`transplant`), then measured
here before it can be anything more (`seed_round`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.domain.fingerprint_nearness import nearest_first
from foundation.meta_schedule.untuned_form import is_untuned_trace_json

from .structure import shape_distance, structure_key

# The registry (SQLAlchemy, 0.2-0.3 s to import) only where a store is at hand: an agent's
# tuning transplants the seeds its coordinator sent without one.
if TYPE_CHECKING:  # pragma: no cover
    from foundation.compile import TuningTask
    from foundation.registry.donor_records import DonorRecord
    from foundation.registry.store import RegistryStore

# The fastest records of each donor workload that are offered: the best is what transfers;
# a second gives the search another start should the first not apply.
RECORDS_PER_DONOR = 2
# Donor traces offered per seed wanted: transplants that do not apply are skipped.
CANDIDATES_PER_SEED = 4


@dataclass(frozen=True)
class SeedTrace:
    """A donor's schedule as stored (its workload and its trace, as JSON), to transplant."""

    workload_json: str
    trace_json: str
    fingerprint_id: str
    own: bool  # measured on the fingerprint the job tunes for
    mean_sec: float
    record_id: int = 0  # the donor record in the registry

    @property
    def source(self) -> str:
        """Where the donor was measured, as `farm_warm_start_seeds_total{source}` says it."""
        return OWN_FINGERPRINT if self.own else OTHER_FINGERPRINT

    def to_json(self) -> dict:
        return {"workload": self.workload_json, "trace": self.trace_json, "fingerprint": self.fingerprint_id,
                "own": self.own, "mean_sec": self.mean_sec, "record_id": self.record_id}

    @staticmethod
    def from_json(value: dict) -> "SeedTrace":
        return SeedTrace(value["workload"], value["trace"], value["fingerprint"], bool(value["own"]),
                         float(value["mean_sec"]), int(value.get("record_id", 0)))


OWN_FINGERPRINT = "own_fingerprint"
OTHER_FINGERPRINT = "other_fingerprint"


def find_seed_traces(store: "RegistryStore", fingerprint_id: str, target_json: str, tvm_version: str,
                     tasks: Sequence["TuningTask"], seeds_per_task: int,
                     other_fingerprints: bool = True) -> list[list[SeedTrace]]:
    """Donor traces for each task, best first (up to ``CANDIDATES_PER_SEED`` per seed wanted)."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import Workload

    from foundation.registry.store import target_kind_of

    if seeds_per_task <= 0 or not tasks:
        return [[] for _ in tasks]
    kind = target_kind_of(target_json)
    fingerprints = {f.id: f.details for f in store.list_fingerprints()}
    order = nearest_first(fingerprint_id, fingerprints.get(fingerprint_id, {}), fingerprints)
    rank = {fp: i for i, fp in enumerate(order)}
    allowed = None if other_fingerprints else [fingerprint_id]
    # One more than offered: an untuned form (at most one a workload and scope) carries no schedule to
    # transplant (every task measures its own, foundation.meta_schedule.untuned_form), and is left out.
    offered: dict[tuple, int] = {}
    donors = []
    for r in store.donors.best_per_workload(tvm_version, RECORDS_PER_DONOR + 1, allowed):
        scope = (r.workload_id, r.fingerprint_id, r.target)
        if (target_kind_of(r.target) == kind and r.fingerprint_id in rank and not is_untuned_trace_json(r.trace)
                and offered.get(scope, 0) < RECORDS_PER_DONOR):
            offered[scope] = offered.get(scope, 0) + 1
            donors.append(r)
    stored = store.records.get_workloads({r.workload_id for r in donors})
    modules = {i: Workload.from_json(json.loads(mod_json)).mod for i, (_shash, mod_json) in stored.items()}
    keys = {i: structure_key(mod) for i, mod in modules.items()}
    shashes = {i: shash for i, (shash, _) in stored.items()}

    def tuned_here(task_mod, task_shash: str) -> bool:
        return any(r.fingerprint_id == fingerprint_id and r.target == target_json
                   and shashes[r.workload_id] == task_shash
                   and tvm_ffi.structural_equal(modules[r.workload_id], task_mod) for r in donors)

    wanted = seeds_per_task * CANDIDATES_PER_SEED
    found: list[list[SeedTrace]] = []
    for task in tasks:
        task_shash = str(tvm_ffi.structural_hash(task.mod))
        key = structure_key(task.mod)
        if tuned_here(task.mod, task_shash):
            found.append([])
            continue
        same = [r for r in donors if keys[r.workload_id] == key]
        distance = {i: shape_distance(task.mod, modules[i]) for i in {r.workload_id for r in same}}
        ordered = sorted(same, key=lambda r, d=distance: _donor_order(r, rank, d))
        found.append([SeedTrace(stored[r.workload_id][1], r.trace, r.fingerprint_id,
                                r.fingerprint_id == fingerprint_id, r.mean_sec, r.id) for r in ordered[:wanted]])
    return found


def seed_traces_by_id(store: "RegistryStore", fingerprint_id: str,
                      record_ids: Sequence[Sequence[int]]) -> list[list[SeedTrace]]:
    """The seeds ``find_seed_traces`` chose, read back by their record ids (one list per task, in
    order): how a coordinator keeps a planned job's seeds without keeping their traces twice.
    A record no longer in the registry is left out."""
    records = store.donors.by_id([i for ids in record_ids for i in ids])
    stored = store.records.get_workloads({r.workload_id for r in records.values()})
    return [[SeedTrace(stored[records[i].workload_id][1], records[i].trace, records[i].fingerprint_id,
                       records[i].fingerprint_id == fingerprint_id, records[i].mean_sec, i)
             for i in ids if i in records and records[i].workload_id in stored] for ids in record_ids]


def _donor_order(record: DonorRecord, rank: dict[str, int], distance: dict[int, float]) -> tuple:
    """Nearest fingerprint first, then nearest shapes, then fastest."""
    return rank[record.fingerprint_id], distance[record.workload_id], record.mean_sec
