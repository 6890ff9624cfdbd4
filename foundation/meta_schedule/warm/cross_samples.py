"""Every fingerprint's measured records as samples of a cost model trained across hardware.

A sample is one record's scheduled program, described as MetaSchedule's XGBModel describes a
candidate (`PerStoreFeature`: one row of 164 numbers per buffer store), with the time it took on
its fingerprint. Its group is (workload, fingerprint): labels are normalised within it, as
TenSet does, so a slow box's records teach the same order as a fast box's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.hardware.device_features import device_vector

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from foundation.registry.entities import StoredRecord
    from foundation.registry.store import RegistryStore

# MetaSchedule's stand-in for "no time measured": a failed candidate is a very slow one.
FAILED_SEC = 1e10


@dataclass(frozen=True)
class CrossSample:
    fingerprint_id: str
    workload_id: int
    record_digest: str
    program: "np.ndarray"  # (stores, features) float32
    cost: float  # seconds; FAILED_SEC for a run that failed

    @property
    def group(self) -> str:
        return f"{self.workload_id}@{self.fingerprint_id}"

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


def registry_dataset(stores: Iterable["RegistryStore"], tvm_version: str, hardware_kind: str = "cpu") -> CrossDataset:
    """The samples of every fingerprint of ``hardware_kind`` in ``stores`` (a registry, shipped
    packs), each record once; a record whose trace no longer replays is left out."""
    samples: dict[tuple[str, str], CrossSample] = {}
    vectors: dict[str, list[float]] = {}
    last = 0
    for position, store in enumerate(stores):
        for fingerprint in store.list_fingerprints():
            if fingerprint.kind != hardware_kind:
                continue
            records = [r for r in store.records.all_records(fingerprint_id=fingerprint.id)
                       if r.tvm_version == tvm_version]
            if not records:
                continue
            vectors.setdefault(fingerprint.id, device_vector(fingerprint.details))
            if position == 0:  # record ids are the first store's (the registry); packs do not grow
                last = max([last, *(r.id for r in records)])
            fresh = [r for r in records if (r.fingerprint_id, r.record_digest) not in samples]
            for sample in _record_samples(store, fresh):
                samples[(sample.fingerprint_id, sample.record_digest)] = sample
    return CrossDataset(list(samples.values()), vectors, last)


def _record_samples(store: "RegistryStore", records: list["StoredRecord"]) -> list[CrossSample]:
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
            # One at a time: _samples skips a trace that no longer replays, and the sample must
            # stay paired with its record.
            candidates, results = _samples(mod, [record])
            if not candidates:
                continue
            [program] = program_features(context, candidates)
            run_secs = results[0].run_secs
            cost = float(run_secs[0]) if run_secs else FAILED_SEC
            out.append(CrossSample(record.fingerprint_id, workload_id, record.record_digest, program, cost))
    return out
