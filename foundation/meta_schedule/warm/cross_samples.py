"""Every fingerprint's measured records as samples of a cost model trained across hardware.

A sample is one record's scheduled program, described as MetaSchedule's XGBModel describes a
candidate (`PerStoreFeature`: one row of 164 numbers per buffer store), with the time it took on
its fingerprint. Its group is (workload, fingerprint): labels are normalised within it, as
TenSet does, so a slow box's records teach the same order as a fast box's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.domain.timing_context import TimingContext
from foundation.hardware.device_features import device_vector

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from foundation.registry.entities import StoredRecord
    from foundation.registry.store import RegistryStore

# MetaSchedule's stand-in for "no time measured": a failed candidate is a very slow one.
FAILED_SEC = 1e10
# Records of one fingerprint made samples before the next fingerprint's turn.
_CHUNK = 64


@dataclass(frozen=True)
class CrossSample:
    fingerprint_id: str
    workload_id: int
    record_digest: str
    program: "np.ndarray"  # (stores, features) float32
    cost: float  # seconds; FAILED_SEC for a run that failed
    timing_context: str = TimingContext.WARM.value  # the cache state its time was taken in

    @property
    def group(self) -> str:
        """The samples whose costs compare: one workload's on one fingerprint, timed in one context."""
        group = f"{self.workload_id}@{self.fingerprint_id}"
        return group if self.timing_context == TimingContext.WARM.value else f"{group}/{self.timing_context}"

    @property
    def failed(self) -> bool:
        return self.cost >= FAILED_SEC


@dataclass(frozen=True)
class CrossDataset:
    samples: list[CrossSample]
    vectors: dict[str, list[float]]  # fingerprint id -> device_vector of its details
    last_record_id: int  # the newest record read of the first store


def program_features(context, candidates) -> list["np.ndarray"]:
    """Each candidate's PerStoreFeature rows, as XGBModel extracts them."""
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    return [x.numpy().astype("float32") for x in PerStoreFeature().extract_from(context, candidates)]


def registry_dataset(stores: Iterable["RegistryStore"], tvm_version: str, hardware_kind: str = "cpu", *,
                     per_fingerprint: int | None = None, deadline: float | None = None) -> CrossDataset:
    """The samples of every fingerprint of ``hardware_kind`` in ``stores`` (a registry, shipped
    packs), each record once; a record whose trace no longer replays is left out.

    ``per_fingerprint``: at most that many of each fingerprint's newest records. ``deadline`` (a
    time.monotonic() value): records not made samples by then are left out. Samples are made a
    few records of each fingerprint in turn, newest first, so that a deadline leaves every
    fingerprint its share. ``last_record_id`` counts every record read, sampled or not, so a
    refresh bounded in time does not run again until more arrive.
    """
    queues: list[tuple["RegistryStore", list["StoredRecord"]]] = []
    queued: set[tuple[str, str]] = set()
    vectors: dict[str, list[float]] = {}
    last = 0
    for position, store in enumerate(stores):
        for fingerprint in store.list_fingerprints():
            if fingerprint.kind != hardware_kind:
                continue
            records = [r for r in store.records.all_records(fingerprint_id=fingerprint.id)
                       if r.tvm_version == tvm_version]
            if position == 0 and records:  # record ids are the first store's (the registry); packs do not grow
                last = max([last, *(r.id for r in records)])
            fresh = [r for r in records if (r.fingerprint_id, r.record_digest) not in queued]
            if per_fingerprint is not None:
                fresh = fresh[-per_fingerprint:]
            if not fresh:
                continue
            vectors.setdefault(fingerprint.id, device_vector(fingerprint.details))
            queued.update((r.fingerprint_id, r.record_digest) for r in fresh)
            queues.append((store, fresh[::-1]))
    samples: list[CrossSample] = []
    while any(queue for _, queue in queues):
        for store, queue in queues:
            if deadline is not None and time.monotonic() >= deadline:
                break
            chunk, queue[:] = queue[:_CHUNK], queue[_CHUNK:]
            samples += _record_samples(store, chunk, deadline)
        else:
            continue
        break
    sampled = {s.fingerprint_id for s in samples}
    return CrossDataset(samples, {fp: v for fp, v in vectors.items() if fp in sampled}, last)


def _record_samples(store: "RegistryStore", records: list["StoredRecord"],
                    deadline: float | None = None) -> list[CrossSample]:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import Workload

    from .cost_models import _samples

    modules = {i: Workload.from_json(json.loads(mod_json)).mod
               for i, (_shash, mod_json) in store.records.get_workloads({r.workload_id for r in records}).items()}
    by_group: dict[tuple[int, str], list] = {}
    for record in records:
        by_group.setdefault((record.workload_id, record.target), []).append(record)
    out = []
    for (workload_id, target_json), group in by_group.items():
        mod = modules.get(workload_id)
        if mod is None:
            continue
        context = ms.TuneContext(mod=mod, target=tvm.target.Target(json.loads(target_json)), task_name="cross")
        for record in group:
            if deadline is not None and time.monotonic() >= deadline:
                return out
            # One at a time: _samples skips a trace that no longer replays, and the sample must
            # stay paired with its record.
            candidates, results = _samples(mod, [record])
            if not candidates:
                continue
            [program] = program_features(context, candidates)
            run_secs = results[0].run_secs
            cost = float(run_secs[0]) if run_secs else FAILED_SEC
            out.append(CrossSample(record.fingerprint_id, workload_id, record.record_digest, program, cost,
                                   record.timing_context))
    return out
