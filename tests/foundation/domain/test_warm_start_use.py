"""A job's warm start summed from its shards' reports, and said in one line."""

from __future__ import annotations

from foundation.domain.warm_start_use import describe, job_warm_start

SHA = "0123456789abcdef" * 4


def _use(own: int, other: int = 0, sha: str = SHA, note: str = "") -> dict:
    return {"seeds_offered": 2 * (own + other), "seeds_own_fingerprint": own, "seeds_other_fingerprints": other,
            "seeds_rejected": 1, "seeds_failed": 0, "cost_model_sha256": sha, "cost_model_note": note}


def test_nothing_reported_is_no_warm_start():
    assert job_warm_start(None) is None and job_warm_start({}) is None


def test_pretrained_only_when_every_shard_started_from_a_stored_model():
    both = job_warm_start({"s0": _use(2), "s1": _use(1, 1)})
    assert both["pretrained_cost_model"] is True and both["cost_model_sha256"] == SHA
    assert (both["seeds_own_fingerprint"], both["seeds_other_fingerprints"], both["seeds_offered"]) == (3, 1, 8)
    one = job_warm_start({"s0": _use(2), "s1": _use(0, sha="", note="refused")})
    assert one["pretrained_cost_model"] is False and one["cost_model_sha256"] == SHA
    assert one["cost_model_note"] == "refused" and one["shards"] == 2


def test_the_line_says_seeds_by_source_and_the_model():
    line = describe(job_warm_start({"s0": _use(2, 1)}))
    assert line == ("3 seeds measured first (2 from this fingerprint's records, 1 from other fingerprints'; "
                    f"1 did not apply) of 6 offered; cost model pretrained on this fingerprint's records "
                    f"(sha256 {SHA[:12]})")
    untrained = describe(job_warm_start({"s0": _use(0, sha="", note="NOT_FOUND"), "s1": _use(0, sha="")}))
    assert untrained.endswith("cost model untrained: NOT_FOUND; over 2 shards")
