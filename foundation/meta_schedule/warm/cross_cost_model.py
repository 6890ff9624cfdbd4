"""MetaSchedule's cost model for a fingerprint with few records: the cross model, taught this
job's own measurements.

The cross model (foundation.meta_schedule.warm.cross_model) ranks candidates from the first
batch, reading this box's device features beside each candidate's program features. What the
job measures (and whatever the fingerprint's own stored model had learned before) trains a
plain XGBModel of its own, and one of two things is done with it (``MODE``):

- ``BLEND``: the two models' scores are blended in rank order, the own model's weight growing
  with its samples (``own / (own + BLEND_SAMPLES)``): rank order, because only the order within
  a batch steers the search and the two models' scores are not on one scale;
- ``FINE_TUNE``: after each measured batch, at most FINE_TUNE_ROUNDS trees fitted to every own
  sample are grown on top of the cross model's (cross_model.fine_tuned), which alone ranks.

Neither retrains on every fingerprint's samples during a job: that would cost more than the
trial it steers. Which ranks better is bench/cost_model_transfer.py's measurement, not assumed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel
from tvm.s_tir.meta_schedule.feature_extractor import PyFeatureExtractor

from foundation.hardware.device_features import device_vector

from .cost_models import KIND as OWN_KIND
from .cost_models import load_cost_model, new_model
from .cross_model import FEW_SAMPLES, CrossModel, PackedPrograms, fine_tuned, load_cross_model, starts_from_cross
from .cross_samples import CrossSample, program_features

if TYPE_CHECKING:  # pragma: no cover
    from foundation.hardware.fingerprint import Fingerprint
    from foundation.registry.store import RegistryStore

BLEND = "blend"
FINE_TUNE = "fine-tune"
# What a job does with its own measurements: BLEND ranked pairs better (0.596 of pairs against 0.555
# fine-tuned, top-5 recall 0.629 against 0.619; top-1 0.209 against 0.256) over three held-out
# fingerprints, and fine-tuning on a box with few records ranked worse than the cross model alone
# (docs/results/cost-model-transfer-xeon207.json: a small dataset, partly recorded beside other work).
MODE = BLEND
# Own samples at which the job's own model weighs as much as the cross model.
BLEND_SAMPLES = 256
# Candidates whose features a job keeps (a few KiB each): more than a task's population of 512
# scored over its generations, the measured best among them.
CACHED_PROGRAMS = 4096

__all__ = ["BLEND", "FEW_SAMPLES", "FINE_TUNE", "MODE", "CrossCostModel", "blended", "cross_cost_model_for"]


def cross_cost_model_for(store: "RegistryStore", fingerprint: "Fingerprint",
                         tvm_version: str) -> "CrossCostModel | None":
    """The cost model a job on ``fingerprint`` starts from when it has few records of its own
    (`starts_from_cross`): the hardware kind's cross model for this box's device features, whose
    own part starts from the fingerprint's stored model when there is one; else None."""
    own = store.cost_models.find(fingerprint.id, tvm_version, OWN_KIND)
    loaded = load_cross_model(store, tvm_version, fingerprint.kind)
    if loaded is None or not starts_from_cross(own, loaded[1]):
        return None
    own_loaded = load_cost_model(store, fingerprint.id, tvm_version) if own is not None else None
    cross, stored = loaded
    return CrossCostModel(cross, device_vector(fingerprint.details), own=own_loaded[0] if own_loaded else None,
                          started_from=describe_cross(stored))


def describe_cross(stored) -> str:
    """How a job's notes name the cross model it started from (``stored``: its StoredCostModel,
    or the CostModelRef a shard names it by)."""
    return f"the cross-hardware cost model (sha256 {stored.sha256[:12]}, {stored.samples} samples)"


def blended(cross: np.ndarray, own: np.ndarray, own_samples: int, blend_samples: int = BLEND_SAMPLES) -> np.ndarray:
    """The blend of the two models' scores of one batch (``BLEND``): ranks, weighted by the
    own model's samples."""
    weight = own_samples / (own_samples + blend_samples)
    return (1 - weight) * _ranks(cross) + weight * _ranks(own)


@derived_object
class CrossCostModel(PyCostModel):
    """A PyCostModel over ``cross`` for the device ``vector`` describes (this box's).

    ``own``: the fingerprint's stored XGBModel to keep teaching (a new one if None).
    ``batches_ranked`` counts the batches it scored: that the search asked it at all.
    """

    def __init__(self, cross: CrossModel, vector: Sequence[float], *, own=None, mode: str = MODE,
                 blend_samples: int = BLEND_SAMPLES, started_from: str = "the cross-hardware cost model"):
        super().__init__()
        if mode not in (BLEND, FINE_TUNE):
            raise ValueError(f"unknown mode {mode!r}: {BLEND} or {FINE_TUNE}")
        self.cross = cross
        self.ranking = cross  # the cross model, fine-tuned on this box's samples in FINE_TUNE mode
        self.vector = list(vector)
        self.mode = mode
        self.blend_samples = blend_samples
        self.own = own if own is not None else new_model()
        # Trained directly on what was measured, its scores are its own from the first booster
        # (XGBModel's default would score at random below 100 samples); its weight is what is small.
        self.own.num_warmup_samples = 0
        self.started_from = started_from
        self.batches_ranked = 0
        self.features = FeatureCache()
        # The own model's update extracts the measured candidates' features again; the search
        # scored them a moment before, so the cache has them.
        self.own.extractor = CachedFeatures(self.features)

    def own_weight(self) -> float:
        """The own model's share of the blend: 0 until it has a booster."""
        if self.mode != BLEND or self.own.booster is None:
            return 0.0
        return self.own.data_size / (self.own.data_size + self.blend_samples)

    def update(self, context, candidates, results) -> None:
        self.own.update(context, candidates, results)
        if self.mode == FINE_TUNE:
            self.ranking = fine_tuned(self.cross, own_samples(self.own), {"": self.vector})

    def predict(self, context, candidates) -> np.ndarray:
        # The candidates' features are extracted and packed once for both models: extraction is
        # most of a prediction's cost, and XGBModel.predict would extract them again.
        self.batches_ranked += 1
        packed = PackedPrograms.of(self.features.of(context, candidates))
        scores = self.ranking.predict_packed(packed, self.vector)
        if self.own_weight() == 0.0 or len(candidates) < 2:
            return scores
        own = packed.scores(self.own.booster.inplace_predict(packed.rows)) if len(packed.rows) else scores
        return blended(scores, own, self.own.data_size, self.blend_samples)

    def load(self, path: str) -> None:
        """Load the own model (the cross model comes from the registry)."""
        self.own.load(path)

    def save(self, path: str) -> None:
        """Save the own model (the cross model is in the registry)."""
        self.own.save(path)


class FeatureCache:
    """The program features of the candidates scored lately, by their program's structural hash.

    The evolutionary search scores its whole population every generation, and much of it again:
    parents carried over unmutated, the measured best it starts each round from. Extracting a
    candidate's features (PerStoreFeature lowers its program) takes tens of milliseconds for a
    convolution; hashing its program a fraction of one.
    """

    def __init__(self, capacity: int = CACHED_PROGRAMS):
        self.capacity = capacity
        self._programs: OrderedDict[int, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    def of(self, context, candidates) -> list[np.ndarray]:
        import tvm_ffi

        keys = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in candidates]
        missing = {k: i for i, k in enumerate(keys) if k not in self._programs}
        if missing:
            fresh = program_features(context, [candidates[i] for i in missing.values()])
            self._programs.update(zip(missing, fresh))
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        out = []
        for key in keys:
            self._programs.move_to_end(key)
            out.append(self._programs[key])
        while len(self._programs) > self.capacity:
            self._programs.popitem(last=False)
        return out


@derived_object
class CachedFeatures(PyFeatureExtractor):
    """PerStoreFeature's features read through a FeatureCache, as MetaSchedule's extractors return them."""

    def __init__(self, cache: FeatureCache):
        super().__init__()
        self.cache = cache

    def extract_from(self, context, candidates) -> list:
        import tvm

        return [tvm.runtime.tensor(features) for features in self.cache.of(context, candidates)]


def own_samples(model) -> list[CrossSample]:
    """An XGBModel's samples (its features and costs per workload) as cross samples of one box
    (fingerprint ""), to fine-tune the cross model on."""
    return [CrossSample("", index, "", np.asarray(features, dtype="float32"), float(cost))
            for index, group in enumerate(model.data.values())
            for features, cost in zip(group.features, group.costs)]


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Scores as their rank in the batch, 0 (slowest) to 1 (fastest)."""
    order = np.argsort(np.argsort(scores, kind="stable"), kind="stable")
    return order / max(len(scores) - 1, 1)
