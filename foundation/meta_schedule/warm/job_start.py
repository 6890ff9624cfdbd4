"""What a job on one fingerprint starts from (seeds for its tasks; the fingerprint's cost model, or
the cross-hardware one while it has few records), what its summary says of them, and what the
cost models learn when it ends."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from foundation.domain.warm_start_use import EMBEDDED_SEARCH, WarmStartUse, WarmStartUsed

from . import SeedTrace, WarmStart
from .cost_models import KIND, MIN_SAMPLES, load_cost_model, refresh_cost_model
from .cross_model import KIND as CROSS_KIND

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.meta_schedule.tuner import TuningReport
    from foundation.registry.store import RegistryStore


def warm_start_for(store: "RegistryStore", fingerprint_id: str, tvm_version: str,
                   seeds: Sequence[SeedTrace], max_seeds_per_task: int) -> WarmStart:
    """The tuning's warm start: the job's seeds (foundation.job_driver.steps.seeds), and the cost
    model its search starts from: the fingerprint's own when it has learned many records, else the
    cross-hardware model when other fingerprints' records taught it more (trained here first,
    bounded in time, when the registry has such records and no cross model yet), else its own."""
    cross = _cross_start(store, fingerprint_id, tvm_version)
    if cross is not None:
        model, stored = cross
        return WarmStart(seeds=seeds, max_seeds_per_task=max_seeds_per_task, cost_model=model,
                         cost_model_sha256=stored.sha256)
    loaded = load_cost_model(store, fingerprint_id, tvm_version)
    return WarmStart(seeds=seeds, max_seeds_per_task=max_seeds_per_task, cost_model=loaded[0] if loaded else None,
                     cost_model_sha256=loaded[1].sha256 if loaded else "")


def _cross_start(store: "RegistryStore", fingerprint_id: str, tvm_version: str):
    """(CrossCostModel, its stored row) when the job starts from the cross model, else None."""
    from .cross_cost_model import cross_cost_model_for  # imports TVM: only a job that tunes comes here
    from .cross_model import START_SECONDS, cross_model_ref, load_cross_model, refresh_cross_model

    fingerprint = store.get_fingerprint(fingerprint_id)
    if fingerprint is None:
        return None
    # A stored model this farm cannot read (one of other device columns, as shipped packs of an older
    # farm carry) counts as none: the job trains one first rather than start as if no box were known.
    readable = load_cross_model(store, tvm_version, fingerprint.kind) is not None
    if not readable and _others_measured(store, fingerprint, tvm_version):
        try:
            refresh_cross_model(store, tvm_version, fingerprint.kind, holder=fingerprint.id, seconds=START_SECONDS)
        except Exception:  # the job starts as it would have without one
            logging.getLogger(__name__).warning("the cross cost model could not be trained", exc_info=True)
            return None
    stored = cross_model_ref(store, fingerprint_id, tvm_version)
    if stored is None or stored.kind != CROSS_KIND:
        return None
    model = cross_cost_model_for(store, fingerprint, tvm_version)
    return None if model is None else (model, stored)


def _others_measured(store: "RegistryStore", fingerprint, tvm_version: str) -> bool:
    """Whether other fingerprints of this one's hardware kind have records enough to train on."""
    from .cross_model import MIN_SAMPLES

    return sum(store.records.count_records(fingerprint_id=f.id, tvm_version=tvm_version)
               for f in store.list_fingerprints() if f.kind == fingerprint.kind and f.id != fingerprint.id) \
        >= MIN_SAMPLES


def learn_from_job(store: "RegistryStore", fingerprint_id: str, target: "tvm.target.Target", tvm_version: str,
                   tell: Callable[[str, str], None]) -> None:
    """Teach the fingerprint's cost model what the job measured, and retrain the hardware kind's
    cross model when records arrived since it learned. A failure here costs the next job its
    head start, not this job its result: it is logged, not raised."""
    tell("learning", "training this fingerprint's cost model on the new records")
    before = store.cost_models.find(fingerprint_id, tvm_version, KIND)
    try:
        stored = refresh_cost_model(store, fingerprint_id, target, tvm_version)
    except Exception:
        logging.getLogger(__name__).warning("the cost model of %s did not learn", fingerprint_id, exc_info=True)
        return
    if stored is None:
        tell("learned", f"cost model of {fingerprint_id}: not trained yet, fewer than {MIN_SAMPLES} records")
    elif before is not None and stored.sha256 == before.sha256:
        tell("learned", f"cost model of {fingerprint_id}: unchanged, {stored.samples} samples (no new records)")
    else:
        tell("learned", f"cost model of {fingerprint_id}: {stored.samples} samples of {stored.workloads} workloads")
    learn_across_fingerprints(store, fingerprint_id, tvm_version, tell)


def learn_across_fingerprints(store: "RegistryStore", fingerprint_id: str, tvm_version: str,
                              tell: Callable[[str, str], None]) -> None:
    """Retrain the cross-hardware model of ``fingerprint_id``'s hardware kind once the records
    arrived since it learned are a share of its samples (cross_model.NEW_SHARE; bounded:
    cross_model.REFRESH_SECONDS); logged, never raised."""
    from .cross_model import MIN_SAMPLES as CROSS_MIN_SAMPLES
    from .cross_model import NEW_SHARE as CROSS_NEW_SHARE
    from .cross_model import refresh_cross_model

    kind = fingerprint_id.split("-", 1)[0]
    before = next((m for m in store.cost_models.of_kind(tvm_version, CROSS_KIND)
                   if m.fingerprint_id.startswith(f"{kind}-")), None)
    try:
        stored = refresh_cross_model(store, tvm_version, kind, holder=fingerprint_id)
    except Exception:
        logging.getLogger(__name__).warning("the cross cost model of %s did not learn", kind, exc_info=True)
        return
    if stored is None:
        tell("learned", f"cross-hardware cost model of {kind}: not trained yet, fewer than {CROSS_MIN_SAMPLES} "
                        "records")
    elif before is not None and stored.sha256 == before.sha256:
        tell("learned", f"cross-hardware cost model of {kind}: unchanged, {stored.samples} samples (retrained once "
                        f"{math.ceil(CROSS_NEW_SHARE * stored.samples)} records arrived since it learned)")
    else:
        tell("learned", f"cross-hardware cost model of {kind}: {stored.samples} samples of {stored.workloads} "
                        "workload-fingerprint groups")


def warm_start_json(report: "TuningReport") -> dict[str, Any]:
    """The job summary's account of its warm start."""
    seeds = report.seeds
    return {
        "seeds_own_fingerprint": seeds.own_fingerprint if seeds else 0,
        "seeds_other_fingerprints": seeds.other_fingerprints if seeds else 0,
        "seeds_rejected": seeds.rejected if seeds else 0,
        "seeds_failed": seeds.failed if seeds else 0,
        "pretrained_cost_model": report.pretrained_cost_model,
        "cost_model_start": report.cost_model_start,
    }


def warm_start_use(report: "TuningReport", warm: WarmStart | None) -> WarmStartUsed:
    """The job's warm start as the registry keeps it with the job (its notes' warm_start_used, one
    search: an agent's shard reports the same), so that `farm status` and `farm report` say it of an
    embedded job as of a distributed one."""
    seeds = report.seeds
    return WarmStartUsed({EMBEDDED_SEARCH: WarmStartUse(
        seeds_offered=sum(len(s) for s in warm.seeds) if warm is not None else 0,
        seeds_own_fingerprint=seeds.own_fingerprint if seeds else 0,
        seeds_other_fingerprints=seeds.other_fingerprints if seeds else 0,
        seeds_rejected=seeds.rejected if seeds else 0,
        seeds_failed=seeds.failed if seeds else 0,
        cost_model_sha256=warm.cost_model_sha256 if warm is not None and warm.cost_model is not None else "",
        cost_model_note=cost_model_note(warm),
        cost_model_kind=cost_model_kind(warm),
        cost_model_start=report.cost_model_start,
    )})


def cost_model_kind(warm: WarmStart | None) -> str:
    """The kind of stored model the search started from: xgb (this fingerprint's), xgb-cross, or ""."""
    if warm is None or warm.cost_model is None:
        return ""
    return CROSS_KIND if hasattr(warm.cost_model, "started_from") else KIND


def cost_model_note(warm: WarmStart | None) -> str:
    """What the job's notes say of a cross model it started from: which, and that the search asked it."""
    model = warm.cost_model if warm is not None else None
    if model is None or not hasattr(model, "started_from"):
        return ""
    return (f"started from {model.started_from}, {model.mode} with this job's measurements; "
            f"it ranked {model.batches_ranked} batches")


def warm_start_text(report: "TuningReport") -> str:
    """One line for people: how many seeds, from where, and the cost model."""
    w = warm_start_json(report)
    seeds = w["seeds_own_fingerprint"] + w["seeds_other_fingerprints"]
    text = (f"{seeds} seeds measured first ({w['seeds_own_fingerprint']} from this fingerprint's records, "
            f"{w['seeds_other_fingerprints']} from other fingerprints'")
    text += f"; {w['seeds_rejected']} did not apply)" if w["seeds_rejected"] else ")"
    model = f"pretrained on {w['cost_model_start']}" if w["pretrained_cost_model"] else "untrained"
    return f"{text}; cost model {model}"
