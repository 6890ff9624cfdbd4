"""Which artifacts a prune deletes (foundation.domain.retention): the rule alone, on plain values."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from foundation.domain.retention import Doomed, Kept, StoredLibrary, plan_retention

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _library(n: int, **fields) -> StoredLibrary:  # type: ignore[no-untyped-def]
    """The n-th artifact made (newer as n grows) of model m on cpu-a, plain llvm, TVM 0.27, intact."""
    values = dict(id=f"art-{n:02d}", model_id="m", fingerprint_id="cpu-a", target="llvm", weights_layout="plain",
                  tvm_version="0.27", created_at=EPOCH + timedelta(hours=n), size=100 * n, validation_passed=True,
                  invalidated=False, pinned=False, in_use=False) | fields
    return StoredLibrary(**values)


def _doomed(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.library.id for d in plan.deletions]


def test_the_newest_n_of_each_scope_stay_and_the_oldest_go_first():
    plan = plan_retention([_library(n) for n in range(1, 7)], keep=2)
    assert _doomed(plan) == ["art-01", "art-02", "art-03", "art-04"]
    assert {d.why for d in plan.deletions} == {Doomed.SUPERSEDED}
    assert plan.bytes == 100 + 200 + 300 + 400
    # The newest is the registry hit; the one after it is among the newest 2.
    assert plan.kept == {Kept.PINNED: 0, Kept.IN_USE: 0, Kept.HIT: 1, Kept.NEWEST: 1}


def test_each_model_fingerprint_target_and_layout_is_a_scope_of_its_own():
    libraries = [_library(1), _library(2), _library(3, weights_layout="prepacked"), _library(4, target="cuda"),
                 _library(5, fingerprint_id="cpu-b"), _library(6, model_id="other")]
    assert _doomed(plan_retention(libraries, keep=1)) == ["art-01"]


def test_pinned_and_in_use_artifacts_stay_beyond_n():
    libraries = [_library(1, pinned=True), _library(2, in_use=True), _library(3), _library(4)]
    plan = plan_retention(libraries, keep=1)
    assert _doomed(plan) == ["art-03"]
    assert plan.kept[Kept.PINNED] == 1 and plan.kept[Kept.IN_USE] == 1


def test_the_registry_hit_stays_when_newer_ones_failed_validation():
    # A hit is the newest artifact that passed validation, of its TVM version too: both stay.
    libraries = [_library(1, tvm_version="0.26"), _library(2), _library(3, validation_passed=False),
                 _library(4, validation_passed=False)]
    plan = plan_retention(libraries, keep=1)
    assert _doomed(plan) == ["art-03"]
    assert plan.kept[Kept.HIT] == 2 and plan.kept[Kept.NEWEST] == 1


def test_invalidated_artifacts_go_first_and_count_toward_no_scope():
    libraries = [_library(1), _library(2), _library(3, invalidated=True), _library(4, invalidated=True)]
    plan = plan_retention(libraries, keep=2)
    # The corrupt ones, although the newest, go, first; the two intact ones are the newest 2.
    assert [(d.library.id, d.why) for d in plan.deletions] == [("art-03", Doomed.INVALIDATED),
                                                               ("art-04", Doomed.INVALIDATED)]


def test_an_invalidated_artifact_that_is_pinned_or_in_use_stays():
    libraries = [_library(1, invalidated=True, pinned=True), _library(2, invalidated=True, in_use=True)]
    assert _doomed(plan_retention(libraries, keep=1)) == []


def test_ties_in_time_fall_by_id_as_a_registry_hit_picks():
    libraries = [_library(1, id="art-a", created_at=EPOCH), _library(2, id="art-b", created_at=EPOCH)]
    assert _doomed(plan_retention(libraries, keep=1)) == ["art-a"]
