"""An xgb cost model trained on the records of every fingerprint, with their device features.

Each sample's program features (PerStoreFeature rows, foundation.meta_schedule.warm.cross_samples)
get its fingerprint's device vector (foundation.hardware.device_features.device_vector) appended to
every row; labels are normalised per (workload, fingerprint); the booster is trained with
MetaSchedule's own XGBModel objective (a candidate's score is the sum over its rows). A model
trained without device features (``vectors=None``) is the baseline it is measured against
(bench/cost_model_transfer.py).

Stored in the registry's cost_models table as kind ``KIND``, one per hardware kind (cpu, cuda)
and TVM version, with no table of its own: the row sits under the fingerprint of that hardware
kind that gave it the most samples (the table keys every model by a fingerprint), and is found
by kind, whichever fingerprint holds it (`load_cross_model`: the most recently trained). Only
the booster is stored: it is retrained from the registry's records, never from its own samples.
"""

from __future__ import annotations

import io
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.errors import RegistryError
from foundation.hardware.device_features import VECTOR_FIELDS

from .cross_samples import CrossSample, registry_dataset

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import xgboost

    from foundation.registry.cost_models import StoredCostModel
    from foundation.registry.store import RegistryStore

KIND = "xgb-cross"
FORMAT = 1
# Fewer samples than this train nothing worth starting from (XGBModel predicts at random below 100).
MIN_SAMPLES = 50
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrossModel:
    booster: "xgboost.Booster"
    program_width: int
    device_fields: tuple[str, ...]  # empty: trained without device features

    def predict(self, programs: Sequence["np.ndarray"], vector: Sequence[float]) -> "np.ndarray":
        """Predicted normalised speed of each program (higher: faster) on the device ``vector``
        describes; a program with no store rows scores 0."""
        import numpy as np
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum

        scores = np.zeros(len(programs), dtype="float64")
        present = [i for i, p in enumerate(programs) if len(p)]
        if present:
            rows = [self.rows(programs[i], vector) for i in present]
            packed = PackSum(xs=rows, ys=None)
            scores[present] = packed.predict_with_score(self.booster.predict(packed.dmatrix))
        return scores

    def rows(self, program: "np.ndarray", vector: Sequence[float]) -> "np.ndarray":
        """``program``'s rows as this model reads them: with the device vector when it has one."""
        import numpy as np

        if program.shape[1] != self.program_width:
            raise ValueError(f"program features of width {program.shape[1]}, the model reads {self.program_width}")
        if not self.device_fields:
            return program
        device = np.broadcast_to(np.asarray(vector, dtype="float32"), (len(program), len(vector)))
        return np.hstack([program, device]).astype("float32")


def normalised_speeds(samples: Sequence[CrossSample]) -> "np.ndarray":
    """Each sample's label: the fastest time of its (workload, fingerprint) group over its own."""
    import numpy as np

    fastest: dict[str, float] = {}
    for s in samples:
        fastest[s.group] = min(fastest.get(s.group, s.cost), s.cost)
    return np.array([fastest[s.group] / s.cost if s.cost > 0 else 0.0 for s in samples], dtype="float32")


def train(samples: Sequence[CrossSample], vectors: Mapping[str, Sequence[float]] | None) -> CrossModel:
    """A model trained on ``samples``, with each one's fingerprint's device vector from
    ``vectors`` (None: without device features)."""
    from .cost_models import new_model

    if not samples:
        raise ValueError("no samples to train a cost model on")
    width = samples[0].program.shape[1]
    model = CrossModel(booster=None, program_width=width,  # type: ignore[arg-type]
                       device_fields=VECTOR_FIELDS if vectors is not None else ())
    empty = [float("nan")] * len(VECTOR_FIELDS)
    kept = [s for s in samples if len(s.program)]
    xs = [model.rows(s.program, (vectors or {}).get(s.fingerprint_id, empty)) for s in kept]
    # MetaSchedule's XGBModel trains the booster: its objective sums a candidate's rows, and it
    # stops early when the ranking of its training data stops improving.
    trainer = new_model()
    trainer._train(xs=xs, ys=normalised_speeds(kept))
    return CrossModel(trainer.booster, width, model.device_fields)


def model_bytes(model: CrossModel) -> bytes:
    """``model`` as the registry stores it: the booster and what its columns are, no pickle."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez_compressed(buffer, format=np.array([FORMAT], dtype="int64"),
                        program_width=np.array([model.program_width], dtype="int64"),
                        device_fields=np.array(model.device_fields, dtype=str),
                        booster=np.frombuffer(bytes(model.booster.save_raw("ubj")), dtype="uint8"))
    return buffer.getvalue()


def model_from_bytes(blob: bytes) -> CrossModel:
    import numpy as np
    import xgboost as xgb

    arrays = np.load(io.BytesIO(blob), allow_pickle=False)
    if int(arrays["format"][0]) != FORMAT:
        raise ValueError(f"cross cost model format {int(arrays['format'][0])}, this farm reads {FORMAT}")
    fields = tuple(str(f) for f in arrays["device_fields"])
    if fields and fields != VECTOR_FIELDS:
        raise ValueError("the cross cost model was trained on other device features than this farm measures")
    booster = xgb.Booster()
    booster.load_model(bytearray(arrays["booster"].tobytes()))
    return CrossModel(booster, int(arrays["program_width"][0]), fields)


def load_cross_model(store: "RegistryStore", tvm_version: str,
                     hardware_kind: str = "cpu") -> tuple[CrossModel, "StoredCostModel"] | None:
    """The hardware kind's most recently trained cross model, or None (none, or a damaged blob)."""
    for stored in store.cost_models.of_kind(tvm_version, KIND):
        if not stored.fingerprint_id.startswith(f"{hardware_kind}-"):
            continue
        try:
            return model_from_bytes(store.cost_models.blob(stored)), stored
        except (RegistryError, ValueError, KeyError, OSError) as err:
            _LOG.warning("not using the cross cost model stored under %s: %s", stored.fingerprint_id, err)
            return None
    return None


def refresh_cross_model(store: "RegistryStore", tvm_version: str, hardware_kind: str = "cpu",
                        shipped: Sequence["RegistryStore"] = ()) -> "StoredCostModel | None":
    """Retrain the hardware kind's cross model on every record of ``store`` (and ``shipped``
    packs) when records arrived since it was trained; returns what is stored (None while
    there are too few samples)."""
    loaded = load_cross_model(store, tvm_version, hardware_kind)
    dataset = registry_dataset([store, *shipped], tvm_version, hardware_kind)
    if loaded is not None and dataset.last_record_id <= loaded[1].last_record_id:
        return loaded[1]
    if len(dataset.samples) < MIN_SAMPLES:
        return loaded[1] if loaded else None
    model = train(dataset.samples, dataset.vectors)
    # Under a fingerprint of this registry (the row's foreign key): the one that gave most samples.
    own = {f.id for f in store.list_fingerprints()}
    counts = Counter(s.fingerprint_id for s in dataset.samples if s.fingerprint_id in own)
    if not counts:  # every sample from shipped packs whose fingerprints the registry lacks
        return loaded[1] if loaded else None
    holder = min(counts, key=lambda fp: (-counts[fp], fp))
    _LOG.info("cross cost model of %s trained on %d samples of %d fingerprints", hardware_kind,
              len(dataset.samples), len(dataset.vectors))
    return store.cost_models.save(holder, tvm_version, KIND, model_bytes(model),
                                  last_record_id=dataset.last_record_id, samples=len(dataset.samples),
                                  workloads=len({s.group for s in dataset.samples}))
