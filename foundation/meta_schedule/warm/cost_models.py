"""An xgb cost model trained on one fingerprint's records, stored in the registry, and its format.

MetaSchedule's XGBModel learns from features of the scheduled program (loop nests, memory
access: `PerStoreFeature`), not from workload identity, so the records of every workload
tuned on a fingerprint can train the model a new job starts from. Hardware is not among the
features: one model per fingerprint (and TVM version, whose features and traces may change).

The stored form is the farm's own (`model_bytes`): the booster in XGBoost's binary format and
the training samples as plain arrays, read back with pickle disallowed. XGBModel.save/load
would round-trip a pickled NumPy object array, which runs code from whoever wrote the blob.

A job's search starts from the loaded model and keeps training it on every measured batch
(adaptive training off: XGBModel retrains only when its data grows by a fifth, which a job's
few hundred trials never do against thousands of stored samples). After the job,
`refresh_cost_model` adds the records stored since the model's last one and stores it again.
"""

from __future__ import annotations

import io
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from foundation.errors import RegistryError

# The registry's modules only where a store is at hand: an agent's tuning builds its cost model
# from bytes its coordinator sent, and is spared SQLAlchemy's import.
if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.registry.cost_models import StoredCostModel
    from foundation.registry.entities import StoredRecord
    from foundation.registry.store import RegistryStore

KIND = "xgb"
FORMAT = 1
# Fewer samples than this train nothing worth starting from (XGBModel itself predicts at random
# below 100); the records wait for the next refresh.
MIN_SAMPLES = 50
# Records added per refresh, oldest first; the rest come with the next one.
MAX_RECORDS_PER_REFRESH = 20_000
# XGBoost trains and predicts on one thread. A training is up to thousands of boosting rounds of a
# few short OpenMP regions each, after every measured batch; with every core busy (agents sharing a
# box, the next batch's builds) each region waits for a descheduled thread: 14 s of wall and 4.3 s
# of CPU for two trainings of 4-14 samples on two threads beside other work, 0.7 s and 0.4 s on one
# (docs/benchmarks.md, "The cost model's threads").
THREADS = 1
# MetaSchedule's stand-in for "no time measured": a failed candidate is a very slow one.
_FAILED_SEC = 1e10
_LOG = logging.getLogger(__name__)


def new_model(adaptive_training: bool = False):
    """An untrained XGBModel as the farm uses it (``adaptive_training``: it retrains only when its
    samples grew by a fifth, as MetaSchedule's own "xgb" model does)."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    return XGBModel(num_tuning_cores=THREADS, adaptive_training=adaptive_training)


def model_bytes(model) -> bytes:
    """``model`` (an XGBModel) as the registry stores it: booster and samples, no pickle."""
    import numpy as np

    keys, groups = list(model.data.keys()), list(model.data.values())
    features = [np.asarray(f, dtype="float32") for g in groups for f in g.features]
    width = features[0].shape[1] if features else 0
    booster = b"" if model.booster is None else bytes(model.booster.save_raw("ubj"))
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        format=np.array([FORMAT], dtype="int64"),
        group_hashes=np.array([str(key) for key in keys], dtype=str),  # a context's group's own key
        group_sizes=np.array([len(g.costs) for g in groups], dtype="int64"),
        costs=np.concatenate([np.asarray(g.costs, dtype="float32") for g in groups]) if groups
        else np.zeros(0, "float32"),
        feature_rows=np.array([len(f) for f in features], dtype="int64"),
        features=np.concatenate(features) if features else np.zeros((0, width), "float32"),
        booster=np.frombuffer(booster, dtype="uint8"),
    )
    return buffer.getvalue()


def model_from_bytes(blob: bytes):
    """The XGBModel ``model_bytes`` wrote, ready to predict and to keep learning."""
    import numpy as np
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    arrays = np.load(io.BytesIO(blob), allow_pickle=False)
    if int(arrays["format"][0]) != FORMAT:
        raise ValueError(f"cost model format {int(arrays['format'][0])}, this farm reads {FORMAT}")
    model = new_model()
    ends = np.cumsum(arrays["feature_rows"])
    features = np.split(arrays["features"], ends[:-1]) if len(ends) else []
    costs = arrays["costs"]
    data: OrderedDict = OrderedDict()
    at = 0
    for group_hash, size in zip(arrays["group_hashes"], arrays["group_sizes"]):
        size = int(size)
        data[str(group_hash)] = FeatureGroup(str(group_hash), list(features[at:at + size]), costs[at:at + size])
        at += size
    model.data = data
    model.data_size = at
    if arrays["booster"].size:
        booster = xgb.Booster()
        booster.load_model(bytearray(arrays["booster"].tobytes()))
        model.booster = booster
    model.last_train_size = model.data_size
    # Trained on this fingerprint's records: its predictions beat random ones from the first round.
    model.num_warmup_samples = 0
    return model


def load_cost_model(store: "RegistryStore", fingerprint_id: str,
                    tvm_version: str) -> tuple[Any, StoredCostModel] | None:
    """The fingerprint's stored model, or None (none stored, or a blob that fails its checks)."""
    stored = store.cost_models.find(fingerprint_id, tvm_version, KIND)
    if stored is None:
        return None
    try:
        return model_from_bytes(store.cost_models.blob(stored)), stored
    except (RegistryError, ValueError, KeyError, OSError) as err:
        _LOG.warning("not using the stored cost model of %s: %s", fingerprint_id, err)
        return None


def learn(model, target: "tvm.target.Target", workloads: dict[int, "tvm.IRModule"],
          records: Sequence["StoredRecord"]) -> int:
    """Add ``records`` (of ``workloads``, by id) to ``model``'s samples and train it once on all
    of them; returns how many records became samples (a trace that no longer replays is skipped).
    A workload's records of each timing context are a group of their own (context_groups)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import shash2hex

    from foundation.meta_schedule.warm.context_groups import samples_filed_in

    by_group: dict[tuple[int, str], list] = {}
    for record in records:
        by_group.setdefault((record.workload_id, record.timing_context), []).append(record)
    groups = []
    for (workload_id, timing_context), group in by_group.items():
        mod = workloads.get(workload_id)
        if mod is None:
            continue
        candidates, results = _samples(mod, group)
        if candidates:
            groups.append((ms.TuneContext(mod=mod, target=target, task_name="cost-model"), timing_context,
                           candidates, results))
    adaptive = model.adaptive_training
    model.adaptive_training = True
    try:
        for i, (context, timing_context, candidates, results) in enumerate(groups):
            # XGBModel retrains on everything at each update; only the last one trains here.
            model.last_train_size = 0 if i == len(groups) - 1 else 10**15
            with samples_filed_in(model, shash2hex(context.mod), timing_context):
                model.update(context, candidates, results)
    finally:
        model.adaptive_training = adaptive
        model.last_train_size = model.data_size
    return sum(len(c) for _, _, c, _ in groups)


def _samples(mod: "tvm.IRModule", records: Sequence["StoredRecord"]) -> tuple[list, list]:
    import json

    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.runner import RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.schedule import Trace

    candidates, results = [], []
    for record in records:
        schedule = Schedule(mod)
        try:
            Trace.apply_json_to_schedule(json.loads(record.trace), schedule)
        except Exception:  # a trace of an older schedule that no longer replays: not a sample
            continue
        candidates.append(MeasureCandidate(schedule, ArgInfo.from_entry_func(schedule.mod, remove_preproc=True)))
        failed = record.mean_sec is None
        results.append(RunnerResult(run_secs=None if failed else [record.mean_sec],
                                    error_msg="failed" if failed else None))
    return candidates, results


def refresh_cost_model(store: "RegistryStore", fingerprint_id: str, target: "tvm.target.Target",
                       tvm_version: str) -> StoredCostModel | None:
    """Teach the fingerprint's stored model (a new one if none) the records stored since it last
    learned, and store it; returns what is stored (None while there are too few records)."""
    import json

    from tvm.s_tir.meta_schedule.database import Workload

    loaded = load_cost_model(store, fingerprint_id, tvm_version)
    model, stored = loaded if loaded is not None else (new_model(), None)
    records = store.cost_models.records_after(fingerprint_id, tvm_version, stored.last_record_id if stored else 0,
                            MAX_RECORDS_PER_REFRESH)
    if not records or (model.data_size + len(records) < MIN_SAMPLES):
        return stored
    modules = {i: Workload.from_json(json.loads(mod_json)).mod
               for i, (_shash, mod_json) in store.records.get_workloads({r.workload_id for r in records}).items()}
    learned = learn(model, target, modules, records)
    if model.booster is None:
        return stored
    _LOG.info("cost model of %s learned %d records (%d samples)", fingerprint_id, learned, model.data_size)
    return store.cost_models.save(fingerprint_id, tvm_version, KIND, model_bytes(model),
                           last_record_id=max(r.id for r in records), samples=model.data_size,
                           workloads=len(model.data))
