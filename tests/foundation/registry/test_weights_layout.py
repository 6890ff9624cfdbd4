"""Plain and prepacked artifacts of one model side by side, and registries from before the column."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from foundation.registry import RegistryStore, migrate, upgrade_registry
from foundation.registry.engine import create_registry_engine, parse_registry_url

TARGET = '{"kind":"llvm"}'


def _artifact_fields(store: RegistryStore) -> dict:
    store.upsert_fingerprint("cpu-1", "cpu", "a cpu", {})
    store.upsert_model(model_id="m-1", name="cnn", source="zoo", source_digest="v1", batch=1, inputs=[],
                       weights=[], num_parameters=1)
    return dict(model_id="m-1", target=TARGET, fingerprint_id="cpu-1", job_id=None, lib_format="so",
                latency={"mean_ms": 1.0, "median_ms": 1.0, "std_ms": 0.0}, untuned_latency_mean_ms=None,
                validation={"passed": True}, tvm_version="0.27.0", software={})


def test_each_form_finds_its_own_artifact_and_none_of_the_other(store):
    fields = _artifact_fields(store)
    plain = store.add_artifact(library=b"plain", **fields)
    assert store.find_artifact("m-1", TARGET, "cpu-1", "0.27.0", "prepacked") is None
    prepacked = store.add_artifact(library=b"prepacked", weights_layout="prepacked", **fields)
    assert (plain.weights_layout, prepacked.weights_layout) == ("plain", "prepacked")
    assert store.find_artifact("m-1", TARGET, "cpu-1", "0.27.0", "plain") == plain
    assert store.find_artifact("m-1", TARGET, "cpu-1", "0.27.0", "prepacked") == prepacked
    # Without a form: the newest of either (what `farm run` loads; the loader handles both).
    assert store.find_artifact("m-1", TARGET, "cpu-1", "0.27.0") == prepacked
    assert store.get_artifact(prepacked.id).weights_layout == "prepacked"


def test_artifacts_from_before_the_column_are_plain(registry_url):
    engine = create_registry_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        command.upgrade(migrate.alembic_config(connection), "0004_record_merge")
        connection.execute(text(
            "INSERT INTO fingerprints (id, kind, summary, details, created_at) "
            "VALUES ('cpu-1', 'cpu', 'a cpu', '{}', '2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO models (id, name, source, source_digest, batch, inputs, weights, num_parameters, "
            "created_at) VALUES ('m-1', 'cnn', 'zoo', 'v1', 1, '[]', '[]', 1, '2026-01-01 00:00:00')"))
        connection.execute(text(
            "INSERT INTO artifacts (id, model_id, target, fingerprint_id, library, sha256, size, "
            "lib_format, latency_mean_ms, latency_median_ms, latency_std_ms, validation, validation_passed, "
            "tvm_version, software, created_at) VALUES ('art-1', 'm-1', :target, 'cpu-1', "
            ":lib, 'x', 3, 'so', 1, 1, 0, '{}', true, '0.27.0', '{}', '2026-01-01 00:00:00')"),
            {"lib": b"lib", "target": TARGET})
    engine.dispose()

    assert upgrade_registry(registry_url) == migrate.head_revision()
    registry = RegistryStore(registry_url)
    try:
        old = registry.get_artifact("art-1")
        assert old.weights_layout == "plain"
        assert registry.find_artifact("m-1", TARGET, "cpu-1", "0.27.0", "plain") == old
        assert registry.find_artifact("m-1", TARGET, "cpu-1", "0.27.0", "prepacked") is None
    finally:
        registry.dispose()
