"""A tuning record's timing context is part of its scope: one trace timed in two contexts is two
records, the best of a workload are read within one context, and the context travels through
migrations, packs, syncs and exported logs; on SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from foundation.registry import NewRecord, RegistryStore, migrate
from foundation.registry.engine import parse_registry_url
from foundation.registry.tuning_records import record_digest

from support.scoped_records import SCOPE, scoped_record, scoped_workload


@pytest.fixture
def workload(store) -> int:
    return scoped_workload(store)


def _record(workload_id: int, trace: str, run_secs, context: str = "warm") -> NewRecord:  # type: ignore[no-untyped-def]
    return scoped_record(workload_id, trace, run_secs, timing_context=context)


def test_a_warm_record_keeps_the_digest_it_had_before_contexts_were_kept():
    record = _record(1, '"t"', [0.001])
    before = hashlib.sha256("\x1f".join(("sha", *SCOPE, '"t"')).encode()).hexdigest()
    assert record_digest("sha", record) == before
    assert record_digest("sha", _record(1, '"t"', [0.001], "weights")) != before


def test_one_trace_timed_in_two_contexts_is_two_records_ranked_apart(store, workload):
    store.records.add_tuning_records([_record(workload, '"a"', [0.001]), _record(workload, '"b"', [0.003]),
                                      _record(workload, '"a"', [0.004], "weights")])
    assert store.records.count_records(workload, *SCOPE) == 3
    assert [(r.trace, r.timing_context) for r in store.records.top_k_records(workload, *SCOPE, 5, "weights")] == [
        ('"a"', "weights")]
    assert [r.trace for r in store.records.top_k_records(workload, *SCOPE, 5, "warm")] == ['"a"', '"b"']
    assert store.records.measured_counts([workload], *SCOPE, "warm") == {workload: 2}
    # Measured again in its own context, a record merges; in another, it does not.
    store.records.add_tuning_records([_record(workload, '"a"', [0.002], "weights")])
    (weights,) = store.records.top_k_records(workload, *SCOPE, 5, "weights")
    assert weights.measurements == 2 and weights.mean_sec == pytest.approx(0.003)


def test_the_context_a_workload_is_ranked_in(store, workload):
    records = store.records
    assert records.context_to_rank(workload, *SCOPE, "weights") == "weights"  # nothing stored: the reader's
    records.add_tuning_records([_record(workload, '"a"', [0.001]), _record(workload, '"f"', [0.002], "flushed"),
                                _record(workload, '"x"', None, "weights")])
    # None of the reader's is valid: the context with the most valid ones, warm on a tie.
    assert records.context_to_rank(workload, *SCOPE, "weights") == "warm"
    records.add_tuning_records([_record(workload, '"g"', [0.002], "flushed")])
    assert records.context_to_rank(workload, *SCOPE, "weights") == "flushed"
    records.add_tuning_records([_record(workload, '"w"', [0.009], "weights")])
    assert records.context_to_rank(workload, *SCOPE, "weights") == "weights"  # one of its own is enough
    assert records.context_to_rank(workload, *SCOPE, "warm") == "warm"


def test_records_stored_before_the_migration_read_as_timed_warm(store, registry_url, workload):
    store.records.add_tuning_records([_record(workload, '"old"', [0.002])])
    store.dispose()
    engine = create_engine(parse_registry_url(registry_url))
    try:
        with engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "0007_artifact_pins")
            assert "timing_context" not in {c["name"] for c in inspect(connection).get_columns("tuning_records")}
            command.upgrade(migrate.alembic_config(connection), "head")
            (index,) = [i for i in inspect(connection).get_indexes("tuning_records")
                        if i["name"] == "ix_tuning_records_scope_mean"]
            assert index["column_names"][:6] == ["workload_id", "fingerprint_id", "target", "tvm_version",
                                                 "timing_context", "mean_sec"]
    finally:
        engine.dispose()
    again = RegistryStore(registry_url)
    try:
        (old,) = again.records.all_records(workload, *SCOPE)
        assert old.timing_context == "warm"
        # Sent again as timed warm, it is the same record.
        again.records.add_tuning_records([_record(workload, '"old"', [0.003])])
        assert [r.measurements for r in again.records.all_records(workload, *SCOPE)] == [2]
    finally:
        again.dispose()


def test_a_pack_written_before_contexts_were_kept_loads_its_records_as_warm(store, workload, tmp_path):
    from foundation.registry.packs import read_pack, write_pack

    store.records.add_tuning_records([_record(workload, '"a"', [0.001])])
    write_pack(store, tmp_path / "new.farmpack", {"fingerprint": "cpu-aaaa"})
    # As the packs shipped before the column were written: its rows without it, the digests over those.
    with gzip.open(tmp_path / "new.farmpack", "rt") as packed:
        header, *rows = [json.loads(line) for line in packed]
    for row in rows:
        row["row"].pop("timing_context", None)
    lines = {name: [json.dumps(r, sort_keys=True, separators=(",", ":")).encode() for r in rows if r["table"] == name]
             for name in header["tables"]}
    for name, table in lines.items():
        header["tables"][name]["sha256"] = hashlib.sha256(b"".join(line + b"\n" for line in table)).hexdigest()
    with gzip.open(tmp_path / "old.farmpack", "wb") as packed:
        packed.write(json.dumps(header).encode() + b"\n")
        packed.writelines(line + b"\n" for table in lines.values() for line in table)

    loaded, _header = read_pack(tmp_path / "old.farmpack")
    try:
        (record,) = loaded.records.all_records()
        assert (record.trace, record.timing_context) == ('"a"', "warm")
    finally:
        loaded.dispose()


def test_a_sync_and_a_pack_carry_each_records_context(store, workload, tmp_path):
    from foundation.registry.packs import read_pack, write_pack
    from foundation.registry.sync import sync_registries

    store.records.add_tuning_records([_record(workload, '"a"', [0.001]), _record(workload, '"a"', [0.004], "weights")])
    destination = RegistryStore(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        sync_registries(store, destination)
        assert sorted(r.timing_context for r in destination.records.all_records()) == ["warm", "weights"]
        write_pack(destination, tmp_path / "p.farmpack", {"fingerprint": "cpu-aaaa"})
    finally:
        destination.dispose()
    packed, _ = read_pack(tmp_path / "p.farmpack")
    try:
        assert sorted(r.timing_context for r in packed.records.all_records()) == ["warm", "weights"]
    finally:
        packed.dispose()


def test_an_exported_log_holds_each_workloads_records_of_one_context(store, workload, tmp_path):
    from foundation.meta_schedule.database.tvm_logs import RECORD_FILE, export_tvm_logs

    other = store.records.commit_workload("456", '["456","bW9k"]')
    store.records.add_tuning_records([
        _record(workload, '"fast-warm"', [0.001]), _record(workload, '"slow-weights"', [0.004], "weights"),
        _record(workload, '"failed-flushed"', None, "flushed"), _record(other, '"only-warm"', [0.002])])
    assert export_tvm_logs(store, tmp_path / "log", *SCOPE)["records"] == 2
    written = [json.loads(line) for line in (tmp_path / "log" / RECORD_FILE).read_text().splitlines()]
    # A workload tuned in a context of its own is exported in it, never beside warm times.
    assert sorted(json.dumps(record[0]) for _, record in written) == ['"only-warm"', '"slow-weights"']
