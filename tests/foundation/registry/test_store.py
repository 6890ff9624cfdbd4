"""RegistryStore on SQLite and PostgreSQL: schema versions, writes, lookups, concurrency."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from foundation.domain.jobs import JobState
from foundation.errors import NotFound, RegistryError
from foundation.registry import NewRecord, RegistryStore, migrate, upgrade_registry
from foundation.registry.engine import parse_registry_url
from foundation.registry.schema import Base

TARGET = '{"kind":"llvm"}'
OTHER_TARGET = '{"kind":"llvm","num-cores":2}'


def _raw_engine(url: str):  # type: ignore[no-untyped-def]
    return create_engine(parse_registry_url(url))


def _seed(store: RegistryStore) -> int:
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {"cores": 2})
    store.upsert_fingerprint("cpu-bbbb", "cpu", "other cpu", {"cores": 4})
    return store.records.commit_workload("123", '["123","bW9k"]')


def _record(workload_id: int, trace: str, run_secs, **scope) -> NewRecord:  # type: ignore[no-untyped-def]
    fields = {"fingerprint_id": "cpu-aaaa", "target": TARGET, "tvm_version": "0.27.0"} | scope
    return NewRecord(workload_id=workload_id, trace=trace, run_secs=run_secs, **fields)


# -- schema ------------------------------------------------------------------------


def test_new_registry_is_created_at_head_with_named_indexes(store, registry_url):
    assert store.counts() == dict.fromkeys(Base.metadata.tables, 0)
    engine = _raw_engine(registry_url)
    with engine.connect() as connection:
        assert migrate.current_revision(connection) == migrate.head_revision()
        indexes = {i["name"] for i in inspect(connection).get_indexes("tuning_records")}
        uniques = {u["name"] for u in inspect(connection).get_unique_constraints("tuning_records")}
    engine.dispose()
    assert "ix_tuning_records_scope_mean" in indexes
    assert "uq_tuning_records_record_digest" in uniques


def test_migrations_match_the_models(store, registry_url):
    engine = _raw_engine(registry_url)
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert diff == []


def _add_probe_revision(tmp_path: Path, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    """Point the farm at a copy of its migrations with one more, harmless revision."""
    head = migrate.head_revision()
    copy = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "versions" / "9000_probe.py").write_text(
        f'revision = "9000"\ndown_revision = "{head}"\nbranch_labels = None\ndepends_on = None\n'
        "from alembic import op\nimport sqlalchemy as sa\n"
        "def upgrade():\n"
        '    op.create_table("probe", sa.Column("id", sa.Integer, primary_key=True))\n'
    )
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", copy)
    return head


def test_outdated_schema_is_refused_until_upgraded(registry_url, tmp_path, monkeypatch):
    RegistryStore(registry_url).dispose()  # at the real head
    old_head = _add_probe_revision(tmp_path, monkeypatch)
    with pytest.raises(RegistryError) as raised:
        RegistryStore(registry_url)
    message = str(raised.value)
    assert f"revision {old_head}" in message and "needs 9000" in message
    assert "farm registry upgrade --registry" in raised.value.fix
    assert upgrade_registry(registry_url) == "9000"
    assert upgrade_registry(registry_url) == "9000"  # already there: nothing to do
    RegistryStore(registry_url).dispose()


def test_the_migrations_plain_head_is_alembics_head(tmp_path, monkeypatch):
    assert migrate.plain_head_revision() == migrate.head_revision()
    _add_probe_revision(tmp_path, monkeypatch)
    assert migrate.plain_head_revision() == migrate.head_revision() == "9000"


def _write_revision(versions: Path, revision: str, down_revision: str) -> None:
    (versions / f"{revision}.py").write_text(
        f'revision = "{revision}"\ndown_revision = {down_revision}\nbranch_labels = None\ndepends_on = None\n'
        "def upgrade():\n    pass\n")


@pytest.mark.parametrize("shape", ["branch", "merge", "annotated"])
def test_migrations_other_than_one_plain_chain_are_left_to_alembic(shape, tmp_path, monkeypatch):
    head = _add_probe_revision(tmp_path, monkeypatch)
    versions = migrate.MIGRATIONS_DIR / "versions"
    if shape == "branch":  # two heads on the same parent
        _write_revision(versions, "9001", f'"{head}"')
    elif shape == "merge":  # one revision with two parents
        _write_revision(versions, "9001", f'"{head}"')
        _write_revision(versions, "9002", '("9000", "9001")')
    else:  # annotated, as newer Alembic templates write it: read the same
        (versions / "9000_probe.py").write_text((versions / "9000_probe.py").read_text().replace(
            'revision = "9000"', 'revision: str = "9000"'))
    expected = "9000" if shape == "annotated" else None
    assert migrate.plain_head_revision() == expected


def test_opening_a_registry_at_the_head_imports_no_alembic(registry_url):
    # Alembic is a third of a `farm` command's start; a registry already at the head needs none of it.
    RegistryStore(registry_url).dispose()
    probe = ("import sys\nfrom foundation.registry import RegistryStore\n"
             "RegistryStore(sys.argv[1]).dispose()\n"
             "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'alembic'))")
    opened = subprocess.run([sys.executable, "-c", probe, registry_url], capture_output=True, text=True, timeout=60)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == "[]"


def test_newer_or_unmanaged_schema_is_refused(registry_url):
    RegistryStore(registry_url).dispose()
    engine = _raw_engine(registry_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(RegistryError, match="9999, newer than this farm"):
        RegistryStore(registry_url)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM alembic_version"))
    engine.dispose()
    with pytest.raises(RegistryError, match="tables but no schema revision"):
        RegistryStore(registry_url)


@pytest.mark.parametrize("row, said", [("", "records a blank schema revision"),
                                       ("0007", "revision 0007, newer than this farm knows"),
                                       ("0005_prepack", "from 0005_prepack to")],
                         ids=["blank", "a prefix", "older than the tables"])
def test_a_version_row_edited_by_hand_is_refused_and_upgrade_changes_nothing(registry_url, row, said):
    RegistryStore(registry_url).dispose()
    engine = _raw_engine(registry_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :row"), {"row": row})
    with pytest.raises(RegistryError) as opened:
        RegistryStore(registry_url)
    with pytest.raises(RegistryError) as upgraded:
        upgrade_registry(registry_url)
    assert said in str(upgraded.value) and "internal" not in str(opened.value)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [row]
    engine.dispose()


def _open_at_once(url: str, openers: int) -> list[BaseException]:
    """Open a RegistryStore on ``url`` from ``openers`` threads at once; what they raised."""
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            RegistryStore(url).dispose()
        except Exception as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an opener hung"
    return errors


def test_many_processes_may_open_a_fresh_registry_at_once(registry_url):
    assert _open_at_once(registry_url, 4) == []


def test_fresh_sqlite_registry_opened_by_many_at_once_switches_to_wal_once(tmp_path):
    # Switching a new file to WAL races between openers, and SQLite answers "database is
    # locked" at once there instead of waiting; a single round passed by luck most times.
    for attempt in range(8):
        url = f"sqlite:///{tmp_path}/round{attempt}/registry.db"
        assert _open_at_once(url, 6) == [], f"round {attempt}"
        engine = _raw_engine(url)
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        engine.dispose()


def test_unreachable_registry_fails_fast_with_a_clear_message():
    started = time.monotonic()
    with pytest.raises(RegistryError) as raised:
        RegistryStore("postgresql://farm:s3cret@127.0.0.1:1/registry")
    assert time.monotonic() - started < 10
    assert str(raised.value.problem).startswith(
        "cannot reach the registry at postgresql+psycopg://farm:***@127.0.0.1:1/registry: "
    )
    assert "s3cret" not in str(raised.value)
    assert "FARM_REGISTRY" in raised.value.fix


@pytest.mark.parametrize("url", ["mysql://u@h/db", "not a url"])
def test_unknown_scheme_is_refused(url):
    with pytest.raises(RegistryError, match="registry URL"):
        RegistryStore(url)


def test_sqlite_registry_gets_its_directory_and_pragmas(tmp_path):
    url = f"sqlite:///{tmp_path / 'a' / 'b' / 'registry.db'}"
    registry = RegistryStore(url)
    with registry._engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    registry.dispose()
    assert (tmp_path / "a" / "b" / "registry.db").is_file()


def test_password_is_masked():
    registry = RegistryStore("sqlite://")
    assert repr(registry) == "RegistryStore('sqlite://')"
    with pytest.raises(RegistryError) as raised:
        RegistryStore("postgres://me:pw@127.0.0.1:1/x")
    assert ":pw@" not in str(raised.value)


# -- fingerprints, models, jobs, artifacts -----------------------------------------


def test_fingerprints_and_models(store):
    assert store.get_fingerprint("cpu-aaaa") is None
    store.upsert_fingerprint("cpu-aaaa", "cpu", "old", {"cores": 2})
    fingerprint = store.upsert_fingerprint("cpu-aaaa", "cpu", "new", {"cores": 2, "avx512": True})
    assert fingerprint.summary == "new" and fingerprint.details["avx512"] is True
    assert fingerprint.created_at.tzinfo is not None
    assert [f.id for f in store.list_fingerprints()] == ["cpu-aaaa"]

    model = dict(
        model_id="m" * 64,
        name="resnet",
        source="zoo",
        source_digest="d1",
        batch=1,
        inputs=[{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}],
        weights=[{"name": "w", "shape": [3], "dtype": "float32"}],
        num_parameters=3,
    )
    first = store.upsert_model(**model)
    assert store.upsert_model(**model | {"name": "renamed"}) == first
    assert store.find_model("resnet", 1, "d1") == first
    assert store.find_model("resnet", 2, "d1") is None
    assert store.get_model("m" * 64).inputs[0]["shape"] == [1, 3, 8, 8]
    assert [m.id for m in store.list_models()] == ["m" * 64]


def test_registering_an_unchanged_fingerprint_writes_nothing(store, registry_url):
    # Every agent of a fleet registers its fingerprint; a rewrite of the same row each time
    # left dead row versions for every record's foreign-key check to walk on PostgreSQL.
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {"cores": 2, "flags": ["avx2"]})
    version = store.unit_of_work.state_version
    row_version = _row_version(registry_url)
    again = store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {"cores": 2, "flags": ["avx2"]})
    assert again.details == {"cores": 2, "flags": ["avx2"]}
    assert store.unit_of_work.state_version == version, "an unchanged fingerprint was written"
    assert _row_version(registry_url) == row_version
    changed = store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {"cores": 2, "flags": ["avx2", "fma"]})
    assert changed.details["flags"] == ["avx2", "fma"]
    assert store.unit_of_work.state_version == version + 1


def _row_version(url: str):  # type: ignore[no-untyped-def]
    # PostgreSQL's xmin names the transaction that wrote the row; SQLite has no such column.
    if not url.startswith("postgresql"):
        return None
    with _raw_engine(url).connect() as connection:
        return connection.exec_driver_sql("SELECT xmin::text FROM fingerprints WHERE id = 'cpu-aaaa'").scalar_one()


def _model_and_fingerprint(store) -> str:  # type: ignore[no-untyped-def]
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    return store.upsert_model(
        model_id="m1",
        name="net",
        source="onnx",
        source_digest="d",
        batch=1,
        inputs=[],
        weights=[],
        num_parameters=0,
    ).id


def test_jobs(store):
    model_id = _model_and_fingerprint(store)
    job = store.create_job(
        model_id=model_id,
        target=TARGET,
        fingerprint_id="cpu-aaaa",
        trials_budget=64,
        options={"per_task": 8},
    )
    assert job.id.startswith("job-") and len(job.id) == 14
    assert (job.state, job.trials_done, job.cache_hit) == ("queued", 0, False)
    running = store.update_job(
        job.id, expect_state="queued", state="running", started_at=job.created_at
    )
    assert running.state == "running" and running.started_at == job.created_at
    assert running.state is JobState.RUNNING and store.get_job(job.id).state is JobState.RUNNING
    with pytest.raises(RegistryError, match="is running, not queued"):
        store.update_job(job.id, expect_state="queued", state="running")
    assert store.update_job(job.id, trials_done=64).trials_done == 64
    assert store.get_job(job.id).trials_done == 64
    with pytest.raises(TypeError):
        store.update_job(job.id, model_id="x")
    with pytest.raises(NotFound):
        store.get_job("job-missing")
    with pytest.raises(NotFound):
        store.update_job("job-missing", state="failed")
    assert [j.id for j in store.list_jobs()] == [job.id]
    with pytest.raises(RegistryError, match="refused a write"):
        store.create_job(
            model_id="no-such-model",
            target=TARGET,
            fingerprint_id="cpu-aaaa",
            trials_budget=1,
            options={},
        )


def _artifact(store, model_id, **overrides):  # type: ignore[no-untyped-def]
    fields = dict(
        model_id=model_id,
        target=TARGET,
        fingerprint_id="cpu-aaaa",
        job_id=None,
        library=b"\x7fELF" + bytes(range(256)) * 40,
        lib_format="so",
        latency={"mean_ms": 1.5, "median_ms": 1.4, "std_ms": 0.1},
        untuned_latency_mean_ms=9.0,
        validation={"tolerance": 1e-4, "max_abs_err": 1e-6, "passed": True},
        tvm_version="0.27.0",
        software={"llvm": "17"},
    )
    return store.add_artifact(**fields | overrides)


def test_artifacts_round_trip_and_lookup(store):
    import hashlib

    model_id = _model_and_fingerprint(store)
    job = store.create_job(
        model_id=model_id, target=TARGET, fingerprint_id="cpu-aaaa", trials_budget=1, options={}
    )
    good = _artifact(store, model_id, job_id=job.id)
    assert good.id.startswith("art-")
    library = store.get_artifact_library(good.id)
    assert good.sha256 == hashlib.sha256(library).hexdigest() and good.size == len(library) == 10244
    assert store.get_artifact(good.id) == good
    assert store.find_artifact(model_id, TARGET, "cpu-aaaa", "0.27.0") == good

    _artifact(store, model_id, validation={"passed": False, "max_abs_err": 3.0})
    _artifact(store, model_id, tvm_version="0.28.0")
    assert store.find_artifact(model_id, TARGET, "cpu-aaaa", "0.27.0") == good
    assert store.find_artifact(model_id, OTHER_TARGET, "cpu-aaaa", "0.27.0") is None
    newer = _artifact(store, model_id, library=b"newer")
    assert store.find_artifact(model_id, TARGET, "cpu-aaaa", "0.27.0") == newer
    assert len(store.list_artifacts(model_id=model_id)) == 4
    with pytest.raises(NotFound):
        store.get_artifact("art-missing")
    with pytest.raises(NotFound):
        store.get_artifact_library("art-missing")
    assert store.counts()["artifacts"] == 4


# -- workloads and records ---------------------------------------------------------


def test_workload_commit_is_idempotent(store):
    first = store.records.commit_workload("42", '["42","AAAA"]')
    assert store.records.commit_workload("42", '["42","AAAA"]') == first
    second = store.records.commit_workload("42", '["42","BBBB"]')  # a hash collision: kept apart
    assert second != first
    assert store.records.find_workloads("42") == [(first, '["42","AAAA"]'), (second, '["42","BBBB"]')]
    assert store.records.find_workloads("43") == []


def test_duplicate_records_are_skipped(store):
    workload = _seed(store)
    batch = [_record(workload, f"[{i}]", [0.001 * (i + 1)]) for i in range(5)]
    assert store.records.add_tuning_records(batch) == 5
    # Same traces, new measurements, and a duplicate inside the batch: only "[9]" is new.
    again = [_record(workload, f"[{i}]", [1.0]) for i in range(5)] + [
        _record(workload, "[9]", [2.0])
    ] * 2
    assert store.records.add_tuning_records(again) == 1
    assert store.records.count_records() == 6
    assert {r.trace: r.run_secs for r in store.records.all_records()}["[0]"] == [0.001]
    assert store.records.add_tuning_records([]) == 0


def test_top_k_is_fastest_valid_first_and_scoped(store):
    workload = _seed(store)
    other_workload = store.records.commit_workload("124", '["124","b3RoZXI="]')
    # One batch is stored in digest order; separate batches keep their order for the tie.
    store.records.add_tuning_records([_record(workload, '"slow"', [0.003, 0.005])])
    store.records.add_tuning_records([_record(workload, '"fast"', [0.001])])
    store.records.add_tuning_records([_record(workload, '"tie"', [0.004])])  # ties "slow", ranks after
    store.records.add_tuning_records(
        [
            _record(workload, '"failed"', None),
            _record(workload, '"timeout"', [1e10]),
            _record(workload, '"empty"', []),
            _record(workload, '"no-insts"', [0.0001], trace_valid=False),
            _record(workload, '"fp"', [0.0001], fingerprint_id="cpu-bbbb"),
            _record(workload, '"target"', [0.0001], target=OTHER_TARGET),
            _record(workload, '"tvm"', [0.0001], tvm_version="0.26.0"),
            _record(other_workload, '"other"', [0.0001]),
        ]
    )
    top = store.records.top_k_records(workload, "cpu-aaaa", TARGET, "0.27.0", 10)
    assert [r.trace for r in top] == ['"fast"', '"slow"', '"tie"']
    assert [r.mean_sec for r in top] == pytest.approx([0.001, 0.004, 0.004])
    assert [r.trace for r in store.records.top_k_records(workload, "cpu-aaaa", TARGET, "0.27.0", 1)] == [
        '"fast"'
    ]
    assert store.records.top_k_records(workload, "cpu-aaaa", TARGET, "0.27.0", 0) == []
    assert store.records.count_records(workload, "cpu-aaaa", TARGET, "0.27.0") == 7
    scoped = store.records.all_records(workload, "cpu-aaaa", TARGET, "0.27.0")
    assert [r.trace for r in scoped][:3] == ['"slow"', '"fast"', '"tie"']
    assert {
        r.mean_sec for r in scoped if r.trace in ('"failed"', '"timeout"', '"empty"', '"no-insts"')
    } == {None}
    both = store.records.top_k_records([workload, other_workload], "cpu-aaaa", TARGET, "0.27.0", 1)
    assert [r.trace for r in both] == ['"other"']


def test_measured_counts_are_valid_records_in_scope_per_workload(store):
    """What exact-workload reuse reads (foundation.meta_schedule.reuse)."""
    workload = _seed(store)
    other_workload = store.records.commit_workload("124", '["124","b3RoZXI="]')
    unmeasured = store.records.commit_workload("125", '["125","bm9uZQ=="]')
    store.records.add_tuning_records([
        _record(workload, '"a"', [0.001]), _record(workload, '"b"', [0.002]),
        _record(workload, '"failed"', None), _record(workload, '"timeout"', [1e10]),
        _record(workload, '"fp"', [0.001], fingerprint_id="cpu-bbbb"),
        _record(workload, '"target"', [0.001], target=OTHER_TARGET),
        _record(workload, '"tvm"', [0.001], tvm_version="0.26.0"),
        _record(other_workload, '"c"', [0.003]),
    ])
    counts = store.records.measured_counts([workload, other_workload, unmeasured], "cpu-aaaa", TARGET, "0.27.0")
    assert counts == {workload: 2, other_workload: 1}
    assert store.records.measured_counts([workload], "cpu-bbbb", TARGET, "0.27.0") == {workload: 1}
    assert store.records.measured_counts([], "cpu-aaaa", TARGET, "0.27.0") == {}


def test_trace_and_args_info_are_stored_as_the_exact_text_given(store):
    # What comes back must be the very text (spacing, number spelling, key order, escapes), or
    # digests and the records agents are sent would drift.
    workload = _seed(store)
    trace = '[["A", {"b":1,  "a":[1.50,2e3,-0.0]}],"\\u00e9\\"q\\"",null]'
    args_info = '[["TENSOR","float32",[1, 64]]]'
    scope = {"software": {"tvm": "0.27.0", "note": "é"}, "job_id": None}
    store.records.add_tuning_records([_record(workload, trace, [0.25, 0.5], args_info=args_info, **scope),
                              _record(workload, "[]", None, args_info=None)])
    stored = {r.trace: r for r in store.records.all_records()}
    assert set(stored) == {trace, "[]"}
    assert stored[trace].args_info == args_info and stored["[]"].args_info is None
    assert stored[trace].run_secs == [0.25, 0.5] and stored["[]"].run_secs is None
    assert stored[trace].software == {"tvm": "0.27.0", "note": "é"}


def test_a_batch_whose_optional_fields_are_all_empty(store):
    # PostgreSQL receives each column as one typed array: a column of nothing but NULLs (no
    # args_info, no run time, no job in the whole batch) still has its type.
    workload = _seed(store)
    store.records.add_tuning_records([_record(workload, f"[{i}]", None, args_info=None, job_id=None) for i in range(3)])
    stored = store.records.all_records()
    assert sorted(r.trace for r in stored) == ["[0]", "[1]", "[2]"]
    assert {(r.args_info, r.job_id, r.mean_sec) for r in stored} == {(None, None, None)}
    assert all(r.run_secs is None for r in stored)


def test_a_trace_that_is_not_json_cannot_add_rows_or_change_other_fields(store):
    # NewRecord's contract is canonical JSON text, but a caller that breaks it must not get a
    # row it never passed or a record filed under another fingerprint: each backend binds
    # every value on its own (PostgreSQL one array per column), so the text is stored as given.
    workload = _seed(store)
    smuggled = {
        "a row": '1},{"trace":1,"workload_id":%d,"fingerprint_id":"cpu-bbbb","record_digest":"x"'  # noqa: UP031 - JSON braces read better unescaped
        % workload,
        "a field": '1,"fingerprint_id":"cpu-bbbb"',
        "a field in args_info": ('[]', '1,"fingerprint_id":"cpu-bbbb"'),
        "an array's quoting": '{"a","b"},{"c"}',
    }
    for smuggles in smuggled.values():
        trace, args_info = smuggles if isinstance(smuggles, tuple) else (smuggles, None)
        store.records.add_tuning_records([_record(workload, trace, [0.1], args_info=args_info)])
    stored = store.records.all_records()
    assert {r.fingerprint_id for r in stored} == {"cpu-aaaa"}, "a smuggled field took effect"
    assert sorted((r.trace, r.args_info) for r in stored) == sorted(
        s if isinstance(s, tuple) else (s, None) for s in smuggled.values()
    )


def test_a_bad_record_rolls_back_the_whole_batch(store):
    workload = _seed(store)
    batch = [_record(workload, f"[{i}]", [0.001]) for i in range(3)]
    with pytest.raises(RegistryError, match="refused a write"):
        store.records.add_tuning_records(
            batch + [_record(workload, '["x"]', [0.1], fingerprint_id="cpu-unknown")]
        )
    with pytest.raises(RegistryError, match="does not have"):
        store.records.add_tuning_records(batch + [_record(workload + 1000, '["y"]', [0.1])])
    assert store.records.count_records() == 0
    assert store.records.add_tuning_records(batch) == 3


def test_concurrent_writers_lose_nothing_and_duplicate_nothing(store, registry_url):
    workload = _seed(store)
    shared = [_record(workload, f'"shared-{i}"', [0.001 * i + 0.001]) for i in range(60)]
    writers, inserted, errors = 4, [], []

    def write(index: int) -> None:
        registry = RegistryStore(registry_url)
        try:
            mine = shared + [_record(workload, f'"own-{index}-{i}"', [0.5]) for i in range(20)]
            random.Random(index).shuffle(mine)
            for start in range(0, len(mine), 10):
                inserted.append(registry.records.add_tuning_records(mine[start : start + 10]))
        except Exception as exc:  # reported below; a thread cannot fail the test itself
            errors.append(exc)
        finally:
            registry.dispose()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    expected = len(shared) + writers * 20
    assert sum(inserted) == expected
    assert store.records.count_records() == expected
    assert len({r.record_digest for r in store.records.all_records()}) == expected
