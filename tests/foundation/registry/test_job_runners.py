"""Runners of embedded jobs in the registry: heartbeats, cancel requests, tuning locks, invalid artifacts."""

from __future__ import annotations

import datetime as dt

from alembic import command
from sqlalchemy import text

from foundation.domain.runners import Runner
from foundation.registry import RegistryStore, migrate, upgrade_registry
from foundation.registry.engine import create_registry_engine, parse_registry_url

ME = Runner("box-a", 4242, 1_700_000_000.25)
OTHER = Runner("box-b", 4242, 1_700_000_000.25)
T0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _job(store: RegistryStore, runner: Runner | None = ME):
    store.upsert_fingerprint("cpu-1", "cpu", "a cpu", {})
    store.upsert_model(model_id="m-1", name="mlp", source="zoo", source_digest="v1", batch=1, inputs=[],
                       weights=[], num_parameters=1)
    return store.create_job(model_id="m-1", target='{"kind":"llvm"}', fingerprint_id="cpu-1", trials_budget=0,
                            options={"mode": "embedded"}, runner=runner)


def test_a_job_records_its_runner_and_beats(store):
    job = _job(store)
    assert job.runner == ME and job.heartbeat_at == job.created_at
    assert [j.id for j in store.unfinished_jobs_with_runner()] == [job.id]
    assert store.runners.beat(ME, at(5), job_id=job.id) is False
    assert store.get_job(job.id).heartbeat_at == at(5)
    # Another process with the same pid on another box moves nothing.
    assert store.runners.beat(OTHER, at(9), job_id=job.id) is False
    assert store.get_job(job.id).heartbeat_at == at(5)
    store.update_job(job.id, state="succeeded")
    assert store.unfinished_jobs_with_runner() == []


def test_a_cancel_request_reaches_the_runners_beat(store):
    job = _job(store)
    assert store.runners.request_cancel(job.id, at(1)) is True
    assert store.get_job(job.id).cancel_requested_at == at(1)
    assert store.runners.beat(ME, at(2), job_id=job.id) is True
    store.update_job(job.id, state="cancelled")
    assert store.runners.request_cancel(job.id, at(3)) is False  # final: nothing to ask
    coordinators = _job(store, runner=None)
    assert store.runners.request_cancel(coordinators.id, at(3)) is False  # no runner to ask


def test_the_tuning_lock_has_one_holder(store):
    first = store.runners.take_tuning_lock("scope-1", "mlp batch 1", ME, at(0))
    assert first.runner == ME and first.job_id is None
    again = store.runners.take_tuning_lock("scope-1", "mlp batch 1", OTHER, at(1))
    assert again.runner == ME, "a held lock was taken"
    store.runners.name_tuning_lock_job("scope-1", ME, "job-1")
    store.runners.beat(ME, at(4), lock_scope="scope-1")
    held = store.runners.get_tuning_lock("scope-1")
    assert held.job_id == "job-1" and held.heartbeat_at == at(4)
    # A holder judged gone is replaced once; a stale view of it replaces nothing.
    assert store.runners.take_over_tuning_lock(held, OTHER, at(200)) is True
    assert store.runners.take_over_tuning_lock(held, Runner("box-c", 1, 1.0), at(201)) is False
    assert store.runners.get_tuning_lock("scope-1").runner == OTHER
    store.runners.release_tuning_lock("scope-1", ME)  # not the holder any more: nothing happens
    assert store.runners.get_tuning_lock("scope-1") is not None
    store.runners.release_tuning_lock("scope-1", OTHER)
    assert store.runners.get_tuning_lock("scope-1") is None
    assert store.runners.take_tuning_lock("scope-1", "mlp batch 1", ME, at(300)).runner == ME


def test_an_invalidated_artifact_is_never_found_again(store):
    job = _job(store)
    fields = dict(model_id="m-1", target='{"kind":"llvm"}', fingerprint_id="cpu-1", job_id=job.id, lib_format="so",
                  latency={"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.0}, untuned_latency_mean_ms=None,
                  validation={"passed": True}, tvm_version="0.27.0", software={})
    older = store.add_artifact(library=b"older", **fields)
    newer = store.add_artifact(library=b"newer", **fields)
    assert store.find_artifact("m-1", '{"kind":"llvm"}', "cpu-1", "0.27.0") == newer
    bad = store.invalidate_artifact(newer.id, "its bytes changed")
    assert bad.invalidated_at is not None and bad.invalid_reason == "its bytes changed"
    assert store.find_artifact("m-1", '{"kind":"llvm"}', "cpu-1", "0.27.0") == older
    assert store.invalidate_artifact(newer.id, "again").invalid_reason == "its bytes changed"


def test_a_registry_at_0002_upgrades_with_a_running_job_and_its_artifact(registry_url):
    engine = create_registry_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        command.upgrade(migrate.alembic_config(connection), "0002")
        connection.execute(text(
            "INSERT INTO fingerprints (id, kind, summary, details, created_at) "
            "VALUES ('cpu-1', 'cpu', 'a cpu', '{}', '2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO models (id, name, source, source_digest, batch, inputs, weights, num_parameters, "
            "created_at) VALUES ('m-1', 'mlp', 'zoo', 'v1', 1, '[]', '[]', 1, '2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO jobs (id, model_id, target, fingerprint_id, state, cache_hit, trials_budget, "
            "trials_done, options, created_at, target_kind, target_request, status) VALUES ('job-old', 'm-1', "
            "'{\"kind\":\"llvm\"}', 'cpu-1', 'running', false, 8, 3, '{\"mode\": \"embedded\"}', "
            "'2026-01-01 00:00:00', 'llvm', 'llvm', '')"))
        connection.execute(text(
            "INSERT INTO artifacts (id, model_id, target, fingerprint_id, job_id, library, sha256, size, "
            "lib_format, latency_mean_ms, latency_median_ms, latency_std_ms, validation, validation_passed, "
            "tvm_version, software, created_at) VALUES ('art-1', 'm-1', '{\"kind\":\"llvm\"}', 'cpu-1', "
            "'job-old', :lib, 'x', 3, 'so', 1, 1, 0, '{}', true, '0.27.0', '{}', '2026-01-01 00:00:00')"),
            {"lib": b"lib"})
    engine.dispose()

    assert upgrade_registry(registry_url) == migrate.head_revision()
    registry = RegistryStore(registry_url)
    try:
        old = registry.get_job("job-old")
        assert (old.state, old.trials_done, old.runner, old.heartbeat_at) == ("running", 3, None, None)
        # Without a runner it is never judged dead; nothing else changed.
        assert registry.unfinished_jobs_with_runner() == []
        art = registry.get_artifact("art-1")
        assert art.job_id == "job-old" and art.invalidated_at is None
        assert registry.find_artifact("m-1", '{"kind":"llvm"}', "cpu-1", "0.27.0") == art
        assert registry.runners.get_tuning_lock("anything") is None
    finally:
        registry.dispose()
