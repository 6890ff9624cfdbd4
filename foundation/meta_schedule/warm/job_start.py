"""What a job on one fingerprint starts from (seeds for its tasks, the fingerprint's cost model),
what its summary says of them, and what the cost model learns when it ends."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import SeedTrace, WarmStart
from .cost_models import KIND, MIN_SAMPLES, load_cost_model, refresh_cost_model

if TYPE_CHECKING:  # pragma: no cover
    import tvm

    from foundation.meta_schedule.tuner import TuningReport
    from foundation.registry.store import RegistryStore


def warm_start_for(store: "RegistryStore", fingerprint_id: str, tvm_version: str,
                   seeds: Sequence[Sequence[SeedTrace]], max_seeds_per_task: int) -> WarmStart:
    """The tuning's warm start: the job's seeds (foundation.job_driver.steps.seeds), and the cost model
    trained on this fingerprint's records, if it has one."""
    loaded = load_cost_model(store, fingerprint_id, tvm_version)
    return WarmStart(seeds=seeds, max_seeds_per_task=max_seeds_per_task, cost_model=loaded[0] if loaded else None,
                     cost_model_sha256=loaded[1].sha256 if loaded else "")


def learn_from_job(store: "RegistryStore", fingerprint_id: str, target: "tvm.target.Target", tvm_version: str,
                   tell: Callable[[str, str], None]) -> None:
    """Teach the fingerprint's cost model what the job measured. A failure here costs the next
    job its head start, not this job its result: it is logged, not raised."""
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


def warm_start_json(report: "TuningReport") -> dict[str, Any]:
    """The job summary's account of its warm start."""
    seeds = report.seeds
    return {
        "seeds_own_fingerprint": seeds.own_fingerprint if seeds else 0,
        "seeds_other_fingerprints": seeds.other_fingerprints if seeds else 0,
        "seeds_rejected": seeds.rejected if seeds else 0,
        "seeds_failed": seeds.failed if seeds else 0,
        "pretrained_cost_model": report.pretrained_cost_model,
    }


def warm_start_use(report: "TuningReport", warm: WarmStart | None) -> dict[str, Any]:
    """The job's warm start as the registry keeps it with the job (its notes' warm_start_used,
    one entry: an agent's shard reports the same, foundation.domain.warm_start_use), so that
    `farm status` and `farm report` say it of an embedded job as of a distributed one."""
    seeds = report.seeds
    return {
        "seeds_offered": sum(len(s) for s in warm.seeds) if warm is not None else 0,
        "seeds_own_fingerprint": seeds.own_fingerprint if seeds else 0,
        "seeds_other_fingerprints": seeds.other_fingerprints if seeds else 0,
        "seeds_rejected": seeds.rejected if seeds else 0,
        "seeds_failed": seeds.failed if seeds else 0,
        "cost_model_sha256": warm.cost_model_sha256 if warm is not None and warm.cost_model is not None else "",
        "cost_model_note": "",
    }


def warm_start_text(report: "TuningReport") -> str:
    """One line for people: how many seeds, from where, and the cost model."""
    w = warm_start_json(report)
    seeds = w["seeds_own_fingerprint"] + w["seeds_other_fingerprints"]
    text = (f"{seeds} seeds measured first ({w['seeds_own_fingerprint']} from this fingerprint's records, "
            f"{w['seeds_other_fingerprints']} from other fingerprints'")
    text += f"; {w['seeds_rejected']} did not apply)" if w["seeds_rejected"] else ")"
    model = "pretrained on this fingerprint's records" if w["pretrained_cost_model"] else "untrained"
    return f"{text}; cost model {model}"
