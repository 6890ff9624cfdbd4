"""Retention in the registry (foundation.registry.prune, .pins), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from foundation.clock import utc_now
from foundation.errors import NotFound
from foundation.registry.schema import JobEventRow

TARGET = '{"kind":"llvm"}'
FINISHED = "succeeded"


def _seed(store) -> str:  # type: ignore[no-untyped-def]
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    return store.upsert_model(model_id="m1", name="mlp", source="zoo", source_digest="d", batch=1, inputs=[],
                              weights=[], num_parameters=0).id


def _tuned(store, model_id: str, *, state: str = FINISHED, weights_layout: str = "plain", passed: bool = True):
    """A job that made an artifact, and the artifact (the job points at it, as a finished job does)."""
    job = store.create_job(model_id=model_id, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    artifact = store.add_artifact(
        model_id=model_id, target=TARGET, fingerprint_id="cpu-aaaa", job_id=job.id, library=b"\x7fELF" * 1000,
        lib_format="so", latency={"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.0}, untuned_latency_mean_ms=None,
        validation={"passed": passed}, tvm_version="0.27.0", software={}, weights_layout=weights_layout)
    job = store.update_job(job.id, state=state, artifact_id=artifact.id,
                           finished_at=utc_now() if state == FINISHED else None)
    return job, artifact


def _prune(store, keep: int = 3, older_than_days: int | None = None):  # type: ignore[no-untyped-def]
    before = None if older_than_days is None else utc_now() - timedelta(days=older_than_days)
    plan = store.pruning.plan(keep, before)
    return plan, store.pruning.apply(plan)


def _artifact_ids(store) -> set[str]:  # type: ignore[no-untyped-def]
    return {a.id for a in store.list_artifacts()}


def test_keeps_the_newest_n_of_each_scope_and_unlinks_the_jobs_of_the_rest(store):
    model = _seed(store)
    made = [_tuned(store, model) for _ in range(5)]
    prepacked = _tuned(store, model, weights_layout="prepacked")
    plan, outcome = _prune(store, keep=2)

    assert _artifact_ids(store) == {made[3][1].id, made[4][1].id, prepacked[1].id}
    assert (outcome.artifacts, outcome.artifact_bytes, outcome.jobs_unlinked) == (3, 3 * 4000, 3)
    # No job names an artifact that is gone: the jobs of deleted ones say they have none now.
    for job, _ in made[:3]:
        assert store.get_job(job.id).artifact_id is None
    assert store.get_job(made[4][0].id).artifact_id == made[4][1].id
    # What a registry hit answers with is untouched.
    assert store.find_artifact(model, TARGET, "cpu-aaaa", "0.27.0", "plain").id == made[4][1].id
    # A second prune finds nothing more to do.
    assert _prune(store, keep=2)[1].artifacts == 0


def test_a_pinned_artifact_stays_until_unpinned(store):
    model = _seed(store)
    oldest = _tuned(store, model)[1]
    for _ in range(3):
        _tuned(store, model)
    pin, new = store.pins.pin(oldest.id)
    assert new and pin.artifact_id == oldest.id
    assert store.pins.pin(oldest.id) == (pin, False)  # twice is once
    _prune(store, keep=1)
    assert oldest.id in _artifact_ids(store) and len(_artifact_ids(store)) == 2
    assert [p.artifact_id for p in store.pins.list()] == [oldest.id]

    assert store.pins.unpin(oldest.id) is True
    assert store.pins.unpin(oldest.id) is False
    _prune(store, keep=1)
    assert oldest.id not in _artifact_ids(store)


def test_pinning_an_unknown_artifact_is_not_found(store):
    _seed(store)
    with pytest.raises(NotFound, match="no artifact 'art-nope'"):
        store.pins.pin("art-nope")
    with pytest.raises(NotFound):
        store.pins.unpin("art-nope")


def test_what_an_unfinished_job_made_or_uses_stays(store):
    model = _seed(store)
    # A job still validating the library it just stored, and an old library a running job points at.
    making = _tuned(store, model, state="validating")[1]
    used_job, used = _tuned(store, model)
    for _ in range(3):
        _tuned(store, model)
    running = store.create_job(model_id=model, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    store.update_job(running.id, state="running", artifact_id=used.id)

    plan, _ = _prune(store, keep=1, older_than_days=0)
    assert {making.id, used.id} <= _artifact_ids(store)
    assert plan.retention.kept[next(k for k in plan.retention.kept if k.name == "IN_USE")] == 2
    # The unfinished jobs stay too; so does the finished one whose artifact stays.
    assert {running.id, used_job.id} <= {j.id for j in store.list_jobs(limit=100)}


def test_a_pin_or_a_use_that_comes_after_the_plan_spares_the_artifact(store):
    model = _seed(store)
    old = [_tuned(store, model)[1] for _ in range(2)]
    _tuned(store, model)
    plan = store.pruning.plan(1, None)
    assert [d.library.id for d in plan.retention.deletions] == [a.id for a in old]
    store.pins.pin(old[0].id)
    store.create_job(model_id=model, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    late = store.list_jobs(limit=1)[0]
    store.update_job(late.id, state="running", artifact_id=old[1].id)

    outcome = store.pruning.apply(plan)
    assert outcome.artifacts == 0 and outcome.spared["artifacts"] == 2
    assert {a.id for a in old} <= _artifact_ids(store)


def test_a_plan_writes_nothing(store):
    model = _seed(store)
    for _ in range(4):
        _tuned(store, model)
    counts = store.counts()
    plan = store.pruning.plan(1, utc_now())
    assert len(plan.retention.deletions) == 3 and len(plan.job_ids) == 3
    assert store.counts() == counts


def test_old_finished_jobs_go_with_their_events_and_recent_or_unfinished_ones_stay(store):
    model = _seed(store)
    old_job, old_artifact = _tuned(store, model)
    store.update_job(old_job.id, finished_at=utc_now() - timedelta(days=40))
    kept_job, _ = _tuned(store, model)  # finished now, and its artifact stays anyway
    failed = store.create_job(model_id=model, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    store.update_job(failed.id, state="failed", finished_at=utc_now() - timedelta(days=40))
    queued = store.create_job(model_id=model, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={})
    with store.unit_of_work.write(store_changes()) as session:
        session.add(JobEventRow(job_id=failed.id, kind="state", payload={}, created_at=utc_now()))

    plan, outcome = _prune(store, keep=1, older_than_days=30)
    # The old job's artifact is superseded, so it and then the job go; the failed old job goes too.
    assert set(plan.job_ids) == {old_job.id, failed.id} and outcome.jobs == 2
    assert old_artifact.id not in _artifact_ids(store)
    assert {j.id for j in store.list_jobs(limit=100)} == {kept_job.id, queued.id}
    with store.unit_of_work.read() as session:
        assert session.scalar(select(func.count()).select_from(JobEventRow)) == 0


def test_invalidated_artifacts_go_first_whatever_their_age(store):
    model = _seed(store)
    artifacts = [_tuned(store, model)[1] for _ in range(3)]
    store.invalidate_artifact(artifacts[2].id, "sha256 mismatch")
    plan, _ = _prune(store, keep=3)
    assert [d.library.id for d in plan.retention.deletions] == [artifacts[2].id]
    assert _artifact_ids(store) == {artifacts[0].id, artifacts[1].id}


def store_changes():  # type: ignore[no-untyped-def]
    from foundation.registry.session import Changes

    return Changes.STATE
