"""MetaSchedule's cost model for a fingerprint with few records: the cross model, blended with
one that learns this job's own measurements.

The cross model (foundation.meta_schedule.warm.cross_model) ranks candidates from the first
batch, reading this box's device features beside each candidate's program features. It is not
retrained during a job (its training set is every fingerprint's records). What the job measures
trains a plain XGBModel of its own, and the two are blended in rank order, the own model's
weight growing with its samples (``own / (own + BLEND_SAMPLES)``): rank order, because only
the order within a batch steers the search and the two models' scores are not on one scale.
A blend rather than fine-tuning the cross booster: a retrain per batch over every
fingerprint's samples would cost more than the trial it steers. Which ranks better is measured
by bench/cost_model_transfer.py, not assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from foundation.hardware.device_features import device_vector

from .cost_models import KIND as OWN_KIND
from .cost_models import new_model
from .cross_model import CrossModel, load_cross_model
from .cross_samples import program_features

if TYPE_CHECKING:  # pragma: no cover
    from foundation.hardware.fingerprint import Fingerprint
    from foundation.registry.store import RegistryStore

# Own samples at which the job's own model weighs as much as the cross model.
BLEND_SAMPLES = 256
# A fingerprint whose own stored model has this many samples starts from it instead. A first
# guess, not a measurement: bench/cost_model_transfer.py's own-share column says where it lies.
FEW_SAMPLES = 1000


def cross_cost_model_for(store: "RegistryStore", fingerprint: "Fingerprint",
                         tvm_version: str) -> "CrossCostModel | None":
    """The cost model a job on ``fingerprint`` starts from when it has few records of its own:
    the hardware kind's cross model for this box's device features; None when its own stored
    model has enough samples, or no cross model is stored."""
    own = store.cost_models.find(fingerprint.id, tvm_version, OWN_KIND)
    if own is not None and own.samples >= FEW_SAMPLES:
        return None
    loaded = load_cross_model(store, tvm_version, fingerprint.kind)
    return None if loaded is None else CrossCostModel(loaded[0], device_vector(fingerprint.details))


@derived_object
class CrossCostModel(PyCostModel):
    """A PyCostModel over ``cross`` for the device ``vector`` describes (this box's)."""

    def __init__(self, cross: CrossModel, vector: Sequence[float], blend_samples: int = BLEND_SAMPLES):
        super().__init__()
        self.cross = cross
        self.vector = list(vector)
        self.blend_samples = blend_samples
        self.own = new_model()

    def own_weight(self) -> float:
        """The own model's share of the blend: 0 until it has a booster and enough samples."""
        if self.own.booster is None or self.own.data_size < self.own.num_warmup_samples:
            return 0.0
        return self.own.data_size / (self.own.data_size + self.blend_samples)

    def update(self, context, candidates, results) -> None:
        self.own.update(context, candidates, results)

    def predict(self, context, candidates) -> np.ndarray:
        cross = self.cross.predict(program_features(context, candidates), self.vector)
        weight = self.own_weight()
        if weight == 0.0 or len(candidates) < 2:
            return cross
        own = self.own.predict(context, candidates)
        return (1 - weight) * _ranks(cross) + weight * _ranks(own)

    def load(self, path: str) -> None:
        """Load the own model (the cross model comes from the registry)."""
        self.own.load(path)

    def save(self, path: str) -> None:
        """Save the own model (the cross model is in the registry)."""
        self.own.save(path)


def _ranks(scores: np.ndarray) -> np.ndarray:
    """Scores as their rank in the batch, 0 (slowest) to 1 (fastest)."""
    order = np.argsort(np.argsort(scores, kind="stable"), kind="stable")
    return order / max(len(scores) - 1, 1)
