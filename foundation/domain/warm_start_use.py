"""What a distributed job's searches started from: its shards' warm-start reports, summed.

Each agent reports, with its shard's completion, the seeds it was offered, measured and could
not apply, and the cost model its search started from (proto WarmStartUse). The job keeps them
by shard (its notes' warm_start_used, foundation.domain.job_spec); `farm status` and `farm report` show the sum, in the
words of the embedded job's summary (foundation.meta_schedule.warm.job_start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The kind of the cost model trained across fingerprints (foundation.meta_schedule.warm.cross_model).
CROSS_KIND = "xgb-cross"
SEED_COUNTS = ("seeds_offered", "seeds_own_fingerprint", "seeds_other_fingerprints", "seeds_rejected",
               "seeds_failed")


def job_warm_start(by_shard: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """The job's warm start from its shards' reports; None before any shard reported."""
    if not by_shard:
        return None
    out: dict[str, Any] = {name: sum(int(u.get(name) or 0) for u in by_shard.values()) for name in SEED_COUNTS}
    models = sorted({u.get("cost_model_sha256") or "" for u in by_shard.values()})
    # Pretrained only when every shard's search started from a stored model.
    out["pretrained_cost_model"] = "" not in models
    out["cost_model_sha256"] = ",".join(m for m in models if m)
    # The embedded job's summary's words for its model (warm_start_json), kept with an embedded job;
    # agents' reports have no such field (the wire's JobWarmStart neither): absent for their jobs.
    if any("cost_model_start" in u for u in by_shard.values()):
        out["cost_model_start"] = "; ".join(sorted({u.get("cost_model_start") or "" for u in by_shard.values()} - {""}))
    out["cost_model_kind"] = ",".join(sorted({u.get("cost_model_kind") or "" for u in by_shard.values()} - {""}))
    out["cost_model_note"] = "; ".join(sorted({u.get("cost_model_note") or "" for u in by_shard.values()} - {""}))
    out["shards"] = len(by_shard)
    return out


def describe(warm: Mapping[str, Any]) -> str:
    """One line for people: seeds measured, from where, of how many offered; the cost model."""
    measured = int(warm["seeds_own_fingerprint"]) + int(warm["seeds_other_fingerprints"])
    text = (f"{measured} seeds measured first ({warm['seeds_own_fingerprint']} from this fingerprint's records, "
            f"{warm['seeds_other_fingerprints']} from other fingerprints'")
    if warm.get("seeds_rejected"):
        text += f"; {warm['seeds_rejected']} did not apply"
    text += f") of {warm['seeds_offered']} offered"
    if warm.get("pretrained_cost_model") and CROSS_KIND in (warm.get("cost_model_kind") or "").split(","):
        model = f"cross-hardware, trained on every fingerprint's records (sha256 {warm['cost_model_sha256'][:12]})"
        if warm.get("cost_model_note"):
            model += f": {warm['cost_model_note']}"
    elif warm.get("pretrained_cost_model"):
        model = f"pretrained on this fingerprint's records (sha256 {warm['cost_model_sha256'][:12]})"
    else:
        model = "untrained" + (f": {warm['cost_model_note']}" if warm.get("cost_model_note") else "")
    shards = int(warm.get("shards") or 1)
    return f"{text}; cost model {model}" + (f"; over {shards} shards" if shards > 1 else "")
