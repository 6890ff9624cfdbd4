"""An xgb cost model trained on the records of every fingerprint, with their device features.

Each sample's program features (PerStoreFeature rows, foundation.meta_schedule.warm.cross_samples)
get device columns appended to every row: its fingerprint's device features
(foundation.hardware.device_features.device_vector, ``DEVICE_FIELDS``); labels are normalised per
(workload, fingerprint); the booster is trained with MetaSchedule's own XGBModel objective (a
candidate's score is the sum over its rows). Models trained without device columns
(``vectors=None``) or with each row read against its box (foundation.meta_schedule.warm.program_on_device,
``COLUMNS``) are the baselines it is measured against (bench/cost_model_transfer.py).

Stored in the registry's cost_models table as kind ``KIND``, one per hardware kind (cpu, cuda)
and TVM version, with no table of its own: the row sits under the fingerprint of that hardware
kind that gave it the most samples when it was first trained (the table keys every model by a
fingerprint; later refreshes replace it there), and is found by kind, whichever fingerprint
holds it (`load_cross_model`: the most recently trained). Only the booster is stored: it is
retrained from the registry's records, never from its own samples, and only once the records
arrived since are a share of what it learned (`refresh_cross_model`, bounded in records and
seconds).
"""

from __future__ import annotations

import io
import logging
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.errors import RegistryError
from foundation.hardware.device_features import VECTOR_FIELDS

from .cost_models import KIND as OWN_KIND
from .cross_samples import CrossSample, registry_dataset
from .program_on_device import device_columns

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import xgboost

    from foundation.registry.cost_models import StoredCostModel
    from foundation.registry.store import RegistryStore

KIND = "xgb-cross"
FORMAT = 1
# The device columns of every row: the box's device features as they are. Leaving one fingerprint
# out of eleven (the four shipped packs, seven views of a Zen 4: AVX2, AVX without FMA and SSE4.2
# code, one core and two), they ranked a box never seen better than no device columns (0.764 of
# pairs against 0.756, top-1 0.400 against 0.344) and than each row read against its box
# (program_on_device.COLUMNS, 0.738: its roofline columns misread a box without FMA);
# docs/results/cost-model-transfer-zen4.json. Over seven fingerprints no device columns had ranked best.
DEVICE_FIELDS = VECTOR_FIELDS
# A fingerprint whose own stored model has this many samples starts from it instead. A first
# guess, not a measurement: bench/cost_model_transfer.py's own-share column says where it lies.
FEW_SAMPLES = 1000
# Fewer samples than this train nothing worth starting from (XGBModel predicts at random below 100).
MIN_SAMPLES = 50
# Boosting rounds at most (XGBModel's own cap; its early stop usually ends it in far fewer).
MAX_ROUNDS = 10_000
# Trees a box's own records add on top of the cross model when it is fine-tuned.
FINE_TUNE_ROUNDS = 50
# A refresh reads at most this many of each fingerprint's newest records, and stops making samples
# and boosting at this many seconds (what it has then is trained and stored): it runs after a job,
# and once before the first job of a registry that has none, which must not wait on it for long.
PER_FINGERPRINT = 3000
REFRESH_SECONDS = 60.0
# A stored model is retrained once the records stored since it learned are this share of its
# samples (XGBModel's adaptive training waits for a fifth more too): a retrain makes every sample
# again (a trace replayed and its features extracted each) and takes the whole REFRESH_SECONDS on a
# registry of a few thousand records, after every job that measured anything; a job's few hundred
# records barely move a model of thousands, and the fingerprint's own model learns them at once.
NEW_SHARE = 0.2
# A job that finds none stored (and other fingerprints' records) trains it first, waiting at most this.
START_SECONDS = 30.0
_LOG = logging.getLogger(__name__)
_UNREADABLE_SAID: set[str] = set()  # the stored models load_cross_model has warned of


@dataclass(frozen=True)
class CrossModel:
    booster: "xgboost.Booster"
    program_width: int
    device_fields: tuple[str, ...]  # the device columns each row gets (device_columns); empty: none

    def predict(self, programs: Sequence["np.ndarray"], vector: Sequence[float]) -> "np.ndarray":
        """Predicted normalised speed of each program (higher: faster) on the device ``vector``
        describes; a program with no store rows scores 0."""
        return self.predict_packed(PackedPrograms.of(programs), vector)

    def predict_packed(self, packed: "PackedPrograms", vector: Sequence[float]) -> "np.ndarray":
        """`predict` of programs packed once (a search scores thousands a batch): one matrix,
        the device columns appended to all its rows at once, predicted in place (no DMatrix)."""
        import numpy as np

        if not len(packed.rows):
            return packed.scores(np.zeros(0, dtype="float32"))
        return packed.scores(self.booster.inplace_predict(self.rows(packed.rows, vector)))

    def rows(self, program: "np.ndarray", vector: Sequence[float]) -> "np.ndarray":
        """``program``'s rows (or a batch's, stacked) as this model reads them: with its device
        columns, computed from each row and the device ``vector``, when it has some."""
        import numpy as np

        if program.shape[1] != self.program_width:
            raise ValueError(f"program features of width {program.shape[1]}, the model reads {self.program_width}")
        if not self.device_fields:
            return program
        return np.hstack([program, device_columns(program, vector, self.device_fields)]).astype("float32")


@dataclass(frozen=True)
class PackedPrograms:
    """A batch of programs' store rows stacked in one matrix, each row knowing its program: what
    a booster predicts rows of, and how row scores sum to a program's (MetaSchedule's PackSum,
    without its DMatrix, kept for every model that scores the batch)."""

    rows: "np.ndarray"  # (rows of every program, program width) float32
    ids: "np.ndarray"  # the program of each row
    count: int  # programs, those with no row among them

    @classmethod
    def of(cls, programs: Sequence["np.ndarray"]) -> "PackedPrograms":
        import numpy as np

        present = [p for p in programs if len(p)]
        width = present[0].shape[1] if present else 0
        rows = np.concatenate(present).astype("float32", copy=False) if present else np.zeros((0, width), "float32")
        ids = np.repeat(np.arange(len(programs)), [len(p) for p in programs])
        return cls(rows, ids, len(programs))

    def scores(self, row_scores: "np.ndarray") -> "np.ndarray":
        """Each program's score: the sum of its rows' (0 for a program with none)."""
        import numpy as np

        return np.bincount(self.ids, weights=row_scores, minlength=self.count).astype("float64", copy=False)


def normalised_speeds(samples: Sequence[CrossSample]) -> "np.ndarray":
    """Each sample's label: the fastest time of its group (workload, fingerprint, timing context) over its own."""
    import numpy as np

    fastest: dict[str, float] = {}
    for s in samples:
        fastest[s.group] = min(fastest.get(s.group, s.cost), s.cost)
    return np.array([fastest[s.group] / s.cost if s.cost > 0 else 0.0 for s in samples], dtype="float32")


def train(samples: Sequence[CrossSample], vectors: Mapping[str, Sequence[float]] | None,
          seconds: float | None = None, device_fields: Sequence[str] = DEVICE_FIELDS) -> CrossModel:
    """A model trained on ``samples``, each row with the ``device_fields`` columns of its
    fingerprint's device vector from ``vectors`` (None: without device columns); ``seconds``
    bounds the boosting."""
    if not samples:
        raise ValueError("no samples to train a cost model on")
    width = samples[0].program.shape[1]
    model = CrossModel(booster=None, program_width=width,  # type: ignore[arg-type]
                       device_fields=tuple(device_fields) if vectors is not None else ())
    kept = [s for s in samples if len(s.program)]
    xs = [model.rows(s.program, _vector(vectors, s.fingerprint_id)) for s in kept]
    booster = boost(xs, normalised_speeds(kept), rounds=MAX_ROUNDS,
                    until=None if seconds is None else time.monotonic() + seconds)
    return CrossModel(booster, width, model.device_fields)


def fine_tuned(model: CrossModel, samples: Sequence[CrossSample], vectors: Mapping[str, Sequence[float]],
               seconds: float | None = None) -> CrossModel:
    """``model`` with at most FINE_TUNE_ROUNDS more trees fitted to ``samples`` (one box's own
    records): its other trees, trained on other hardware, are kept as they are."""
    kept = [s for s in samples if len(s.program)]
    if not kept:
        return model
    base = model.booster.copy()
    # The early stop judges the new trees on the new samples, not against the old training score.
    base.set_attr(best_score=None, best_iteration=None, best_msg=None)
    xs = [model.rows(s.program, _vector(vectors, s.fingerprint_id)) for s in kept]
    booster = boost(xs, normalised_speeds(kept), base=base, rounds=FINE_TUNE_ROUNDS,
                    until=None if seconds is None else time.monotonic() + seconds)
    return CrossModel(booster, model.program_width, model.device_fields)


def _vector(vectors: Mapping[str, Sequence[float]] | None, fingerprint_id: str) -> Sequence[float]:
    return (vectors or {}).get(fingerprint_id, [float("nan")] * len(VECTOR_FIELDS))


def boost(xs: Sequence["np.ndarray"], ys: "np.ndarray", *, base: "xgboost.Booster | None" = None,
          rounds: int, until: float | None = None) -> "xgboost.Booster":
    """A booster trained as MetaSchedule's XGBModel trains one (its objective sums a candidate's
    rows; it stops when the ranking of its training data stops improving), on top of ``base``
    when given, stopped at ``until`` (a time.monotonic() value) whatever it has reached."""
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum, _get_custom_call_back

    from .cost_models import new_model

    settings = new_model()
    packed = PackSum(xs=list(xs), ys=ys)

    class _Until(xgb.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log) -> bool:
            return until is not None and time.monotonic() >= until

    callbacks = [
        _get_custom_call_back(
            early_stopping_rounds=settings.early_stopping_rounds, verbose_eval=0,
            fevals=[lambda p, _d: packed.rmse(p), lambda p, _d: packed.average_peak_score(p, settings.average_peak_n)],
            evals=[(packed.dmatrix, "tr")]),
        _Until(),
    ]
    return xgb.train(settings.config.to_dict(), packed.dmatrix, num_boost_round=rounds,
                     obj=lambda p, _d: packed.obj_square_error(p), callbacks=callbacks, xgb_model=base)


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
    if fields and fields != DEVICE_FIELDS:
        # A model of other columns (each row read against its box, as before) would misread every
        # row: a refresh retrains it.
        raise ValueError("the cross cost model was trained on other device features than this farm computes")
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
            # A job reads the stored model several times (start, blend, refresh): said once per model.
            if stored.sha256 not in _UNREADABLE_SAID:
                _UNREADABLE_SAID.add(stored.sha256)
                _LOG.warning("not using the cross cost model stored under %s: %s", stored.fingerprint_id, err)
            return None
    return None


def cross_model_ref(store: "RegistryStore", fingerprint_id: str, tvm_version: str) -> "StoredCostModel | None":
    """The stored model a job on ``fingerprint_id`` starts from (`starts_from_cross`): the
    hardware kind's cross model or the fingerprint's own, or None. What a shard names (its
    agent builds the model from it)."""
    own = store.cost_models.find(fingerprint_id, tvm_version, OWN_KIND)
    kind = fingerprint_id.split("-", 1)[0]
    cross = next((m for m in store.cost_models.of_kind(tvm_version, KIND)
                  if m.fingerprint_id.startswith(f"{kind}-")), None)
    return cross if starts_from_cross(own, cross) else own


def starts_from_cross(own: "StoredCostModel | None", cross: "StoredCostModel | None") -> bool:
    """Whether a job starts from the cross model: there is one, the fingerprint's own model has
    learned fewer than FEW_SAMPLES records, and the cross model more (other fingerprints' records:
    trained on this fingerprint's alone, it knows no more than the own model does)."""
    if cross is None:
        return False
    return own is None or (own.samples < FEW_SAMPLES and cross.samples > own.samples)


def arrived_share(store: "RegistryStore", tvm_version: str, hardware_kind: str, stored: "StoredCostModel") -> bool:
    """Whether the records stored since ``stored`` learned are NEW_SHARE of its samples or more
    (read up to that many, no more)."""
    wanted = max(1, math.ceil(NEW_SHARE * stored.samples))
    arrived = 0
    for fingerprint in store.list_fingerprints():
        if fingerprint.kind != hardware_kind:
            continue
        arrived += len(store.cost_models.records_after(fingerprint.id, tvm_version, stored.last_record_id,
                                                       wanted - arrived))
        if arrived >= wanted:
            return True
    return False


def refresh_cross_model(store: "RegistryStore", tvm_version: str, hardware_kind: str = "cpu",
                        shipped: Sequence["RegistryStore"] = (), holder: str | None = None,
                        seconds: float = REFRESH_SECONDS) -> "StoredCostModel | None":
    """Retrain the hardware kind's cross model on the records of ``store`` (and ``shipped``
    packs) once the records arrived since it was trained are NEW_SHARE of its samples (a model
    with none stored: when there are records); returns what is stored (None while there are too
    few samples).

    Whether records arrived is one query; only then are they counted, up to the share, and
    only when there are enough are they all read. The retrain takes each
    fingerprint's newest PER_FINGERPRINT records and stops at ``seconds`` (samples made and
    trees grown by then are what it keeps). The row sits under the fingerprint of this registry
    that gave most samples, else ``holder`` (a fingerprint of it: every sample came from packs).
    """
    loaded = load_cross_model(store, tvm_version, hardware_kind)
    newest = store.cost_models.newest_record_id(tvm_version, hardware_kind)
    if loaded is not None and (newest <= loaded[1].last_record_id
                               or not arrived_share(store, tvm_version, hardware_kind, loaded[1])):
        return loaded[1]
    if newest == 0 and not shipped:
        return loaded[1] if loaded else None
    until = time.monotonic() + seconds
    dataset = registry_dataset([store, *shipped], tvm_version, hardware_kind, per_fingerprint=PER_FINGERPRINT,
                               deadline=until)
    if len(dataset.samples) < MIN_SAMPLES:
        return loaded[1] if loaded else None
    model = train(dataset.samples, dataset.vectors, seconds=max(1.0, until - time.monotonic()))
    own = {f.id for f in store.list_fingerprints()}
    counts = Counter(s.fingerprint_id for s in dataset.samples if s.fingerprint_id in own)
    if loaded is not None:  # one row per hardware kind: it stays where it is, replaced
        holder = loaded[1].fingerprint_id
    elif counts:
        holder = min(counts, key=lambda fp: (-counts[fp], fp))
    elif holder is None or holder not in own:
        return None
    _LOG.info("cross cost model of %s trained on %d samples of %d fingerprints", hardware_kind,
              len(dataset.samples), len(dataset.vectors))
    return store.cost_models.save(holder, tvm_version, KIND, model_bytes(model),
                                  last_record_id=max(dataset.last_record_id, newest),
                                  samples=len(dataset.samples),
                                  workloads=len({s.group for s in dataset.samples}))
