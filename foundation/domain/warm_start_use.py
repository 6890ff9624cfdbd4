"""What a job's searches started from: each search's warm start (an agent's shard, or an embedded job's one
search), kept with the job as its note `warm_start_used` (foundation.domain.job_spec), and their sum.

Each agent reports, with its shard's completion, the seeds it was offered, measured and could
not apply, and the cost model its search started from (proto WarmStartUse); an embedded job keeps its
search's the same way, under "embedded" (foundation.meta_schedule.warm.job_start). `farm status` and
`farm report` show the sum, in the words of the embedded job's summary.

Stored form (`WarmStartUsed.to_json`): by shard id, each search's `WarmStartUse.to_json`: the seed counts
(SEED_COUNTS), `cost_model_sha256` and `cost_model_note`; with `cost_model_kind` (rows from before the
cross-hardware model lack it), `cost_model_id` (a coordinator's, when a model was named) and
`cost_model_start` (the embedded summary's words) when known. Read strictly: a field none of these is a
ValueError, a count or text of the first group missing a KeyError; `cost_model_id` null reads as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from foundation.domain import json_fields

# The kind of the cost model trained across fingerprints (foundation.meta_schedule.warm.cross_model).
CROSS_KIND = "xgb-cross"
SEED_COUNTS = ("seeds_offered", "seeds_own_fingerprint", "seeds_other_fingerprints", "seeds_rejected",
               "seeds_failed")
_OPTIONAL = ("cost_model_id", "cost_model_kind", "cost_model_start")


@dataclass(frozen=True)
class WarmStartUse:
    """One search's warm start: the seeds it was offered and what became of them, and its cost model."""

    seeds_offered: int
    seeds_own_fingerprint: int
    seeds_other_fingerprints: int
    seeds_rejected: int
    seeds_failed: int
    cost_model_sha256: str  # "" when the search started untrained
    cost_model_note: str  # why it started untrained, or which cross model; "" when there is nothing to say
    cost_model_kind: str | None = None  # xgb, xgb-cross or ""; None: reported before kinds were kept
    cost_model_id: int | None = None  # the registry's id of the model a coordinator named
    cost_model_start: str | None = None  # the embedded summary's words for its model; agents report none

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in (*SEED_COUNTS, "cost_model_sha256",
                                                                      "cost_model_note")}
        out.update({name: getattr(self, name) for name in _OPTIONAL if getattr(self, name) is not None})
        return out

    @staticmethod
    def from_json(value: dict[str, Any]) -> "WarmStartUse":
        if not isinstance(value, dict):
            raise ValueError(f"a shard's warm start {value!r} is not an object")
        unknown = sorted(set(value) - {*SEED_COUNTS, "cost_model_sha256", "cost_model_note", *_OPTIONAL})
        if unknown:
            raise ValueError(f"a shard's warm start holds {', '.join(unknown)}")
        model_id, kind, start = (value.get(name) for name in _OPTIONAL)
        return WarmStartUse(*(json_fields.count(value[name], name) for name in SEED_COUNTS),
                            cost_model_sha256=json_fields.text(value["cost_model_sha256"], "cost_model_sha256"),
                            cost_model_note=json_fields.text(value["cost_model_note"], "cost_model_note"),
                            cost_model_kind=json_fields.text(kind, "cost_model_kind") if kind is not None else None,
                            cost_model_id=(json_fields.count(model_id, "cost_model_id")
                                           if model_id is not None else None),
                            cost_model_start=json_fields.text(start, "cost_model_start") if start is not None else None)


EMBEDDED_SEARCH = "embedded"  # the one search of an embedded job, where a distributed job names its shard


@dataclass(frozen=True)
class WarmStartUsed:
    """A job's warm starts by search: its shards' ids, or EMBEDDED_SEARCH."""

    by_shard: Mapping[str, WarmStartUse] = field(default_factory=dict)

    def with_shard(self, shard_id: str, use: WarmStartUse) -> "WarmStartUsed":
        return WarmStartUsed({**self.by_shard, shard_id: use})

    def to_json(self) -> dict[str, Any]:
        return {shard: use.to_json() for shard, use in self.by_shard.items()}

    @staticmethod
    def from_json(value: dict[str, Any]) -> "WarmStartUsed":
        if not isinstance(value, dict):
            raise ValueError(f"warm_start_used {value!r} is not an object by shard")
        return WarmStartUsed({str(shard): WarmStartUse.from_json(use) for shard, use in value.items()})


def job_warm_start(used: WarmStartUsed | None) -> dict[str, Any] | None:
    """The job's warm start from its shards' reports; None before any shard reported."""
    if used is None or not used.by_shard:
        return None
    by_shard = used.by_shard
    out: dict[str, Any] = {name: sum(getattr(u, name) for u in by_shard.values()) for name in SEED_COUNTS}
    models = sorted({u.cost_model_sha256 for u in by_shard.values()})
    # Pretrained only when every shard's search started from a stored model.
    out["pretrained_cost_model"] = "" not in models
    out["cost_model_sha256"] = ",".join(m for m in models if m)
    # The embedded job's summary's words for its model (warm_start_json), kept with an embedded job;
    # agents' reports have no such field (the wire's JobWarmStart neither): absent for their jobs.
    if any(u.cost_model_start is not None for u in by_shard.values()):
        out["cost_model_start"] = "; ".join(sorted({u.cost_model_start or "" for u in by_shard.values()} - {""}))
    out["cost_model_kind"] = ",".join(sorted({u.cost_model_kind or "" for u in by_shard.values()} - {""}))
    out["cost_model_note"] = "; ".join(sorted({u.cost_model_note for u in by_shard.values()} - {""}))
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
