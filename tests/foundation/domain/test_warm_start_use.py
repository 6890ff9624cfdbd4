"""A job's warm start summed from its shards' reports, and said in one line; kept with the job strictly."""

from __future__ import annotations

import pytest

from foundation.domain.warm_start_use import WarmStartUse, WarmStartUsed, describe, job_warm_start

SHA = "0123456789abcdef" * 4


def _use(own: int, other: int = 0, sha: str = SHA, note: str = "") -> WarmStartUse:
    return WarmStartUse(seeds_offered=2 * (own + other), seeds_own_fingerprint=own, seeds_other_fingerprints=other,
                        seeds_rejected=1, seeds_failed=0, cost_model_sha256=sha, cost_model_note=note)


def _by(**shards: WarmStartUse) -> WarmStartUsed:
    return WarmStartUsed(shards)


def test_nothing_reported_is_no_warm_start():
    assert job_warm_start(None) is None and job_warm_start(WarmStartUsed()) is None


def test_pretrained_only_when_every_shard_started_from_a_stored_model():
    both = job_warm_start(_by(s0=_use(2), s1=_use(1, 1)))
    assert both["pretrained_cost_model"] is True and both["cost_model_sha256"] == SHA
    assert (both["seeds_own_fingerprint"], both["seeds_other_fingerprints"], both["seeds_offered"]) == (3, 1, 8)
    one = job_warm_start(_by(s0=_use(2), s1=_use(0, sha="", note="refused")))
    assert one["pretrained_cost_model"] is False and one["cost_model_sha256"] == SHA
    assert one["cost_model_note"] == "refused" and one["shards"] == 2


def test_the_line_says_seeds_by_source_and_the_model():
    line = describe(job_warm_start(_by(s0=_use(2, 1))))
    assert line == ("3 seeds measured first (2 from this fingerprint's records, 1 from other fingerprints'; "
                    f"1 did not apply) of 6 offered; cost model pretrained on this fingerprint's records "
                    f"(sha256 {SHA[:12]})")
    untrained = describe(job_warm_start(_by(s0=_use(0, sha="", note="NOT_FOUND"), s1=_use(0, sha=""))))
    assert untrained.endswith("cost model untrained: NOT_FOUND; over 2 shards")


# As each writer stores one search's warm start: an agent's (through the coordinator), and an embedded job's.
AGENTS = {"seeds_offered": 4, "seeds_own_fingerprint": 1, "seeds_other_fingerprints": 2, "seeds_rejected": 1,
          "seeds_failed": 0, "cost_model_id": 3, "cost_model_sha256": SHA, "cost_model_kind": "xgb-cross",
          "cost_model_note": "started from 2 fingerprints"}
EMBEDDED = {"seeds_offered": 0, "seeds_own_fingerprint": 0, "seeds_other_fingerprints": 0, "seeds_rejected": 0,
            "seeds_failed": 0, "cost_model_sha256": "", "cost_model_start": "", "cost_model_kind": "",
            "cost_model_note": ""}


def test_the_stored_form_reads_back_the_same():
    stored = {"s0": AGENTS, "embedded": EMBEDDED}
    read = WarmStartUsed.from_json(stored)
    assert read.by_shard["s0"].cost_model_id == 3 and read.by_shard["embedded"].cost_model_start == ""
    assert read.to_json() == stored
    # The embedded summary's words are carried only when a search kept them (agents keep none).
    assert "cost_model_start" in job_warm_start(read) and "cost_model_start" not in job_warm_start(_by(s0=_use(1)))


def test_older_reports_read_with_the_documented_defaults():
    # Before the cross model, no kind; a coordinator's report of a search without a model has a null id.
    older = {k: v for k, v in AGENTS.items() if k != "cost_model_kind"} | {"cost_model_id": None}
    use = WarmStartUse.from_json(older)
    assert (use.cost_model_kind, use.cost_model_id) == (None, None)
    assert job_warm_start(WarmStartUsed({"s0": use}))["cost_model_kind"] == ""


@pytest.mark.parametrize(("stored", "named"), [
    ({**AGENTS, "seeds_skipped": 1}, "holds seeds_skipped"),
    ({k: v for k, v in AGENTS.items() if k != "seeds_failed"}, "seeds_failed"),
    ({**AGENTS, "seeds_offered": "4"}, "seeds_offered '4' is not a count"),
    ({**AGENTS, "cost_model_note": None}, "cost_model_note None is not text"),
    ("4 seeds", "is not an object"),
])
def test_a_report_its_type_cannot_read_is_refused_naming_the_field(stored, named):
    with pytest.raises((ValueError, KeyError), match=named):
        WarmStartUsed.from_json({"s0": stored})
