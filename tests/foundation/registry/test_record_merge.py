"""One record per trace and scope: every measurement kept and merged; the best read from the index."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import create_engine, event, text

from foundation.registry import RegistryStore, migrate
from foundation.registry.engine import parse_registry_url

from support.scoped_records import SCOPE, scoped_workload
from support.scoped_records import scoped_record as _record


@pytest.fixture
def workload(store) -> int:
    return scoped_workload(store)


def _only(store, workload):  # type: ignore[no-untyped-def]
    (record,) = store.records.all_records(workload, *SCOPE)
    return record


def test_a_trace_measured_again_is_one_record_with_every_measurement_merged(store, workload):
    assert store.records.add_tuning_records([_record(workload, '"a"', [0.002], "job-1")]) == 1
    # Another job measures the same trace: no new record, a second measurement.
    assert store.records.add_tuning_records([_record(workload, '"a"', [0.004, 0.004], "job-2")]) == 0
    a = _only(store, workload)
    assert (a.measurements, a.valid_measurements) == (2, 2) and a.mean_sec == pytest.approx(0.003)
    assert a.run_secs == [0.002] and a.job_id == "job-1"  # the record's own: the first measurement

    # The same numbers again (a retried report, a log exported and imported back) change nothing.
    store.records.add_tuning_records([_record(workload, '"a"', [0.004, 0.004], "job-3")])
    store.records.add_tuning_records([_record(workload, '"a"', [0.002])])
    assert (_only(store, workload).measurements, _only(store, workload).mean_sec) == (2, pytest.approx(0.003))

    # A failed measurement is kept and counted, and leaves the mean alone.
    store.records.add_tuning_records([_record(workload, '"a"', None, "job-4")])
    a = _only(store, workload)
    assert (a.measurements, a.valid_measurements) == (3, 2) and a.mean_sec == pytest.approx(0.003)
    assert store.records.measurements_of(a.id) == [([0.002], 0.002, "job-1"), ([0.004, 0.004], 0.004, "job-2"),
                                           (None, None, "job-4")]

    # Twice in one batch: one record, both measurements; ranks by the merged mean.
    twice = [_record(workload, '"b"', [0.001]), _record(workload, '"b"', [0.0035])]
    assert store.records.add_tuning_records(twice) == 1
    top = store.records.top_k_records(workload, *SCOPE, 10)
    assert [(r.trace, r.measurements) for r in top] == [('"b"', 2), ('"a"', 3)]
    assert top[0].mean_sec == pytest.approx(0.00225)
    assert store.records.count_records(workload, *SCOPE) == 2 and store.counts()["tuning_measurements"] == 3


def test_a_record_that_failed_first_becomes_valid_when_it_runs(store, workload):
    store.records.add_tuning_records([_record(workload, '"late"', [1e10])])
    assert store.records.top_k_records(workload, *SCOPE, 1) == []
    store.records.add_tuning_records([_record(workload, '"late"', [0.005])])
    (late,) = store.records.top_k_records(workload, *SCOPE, 1)
    assert (late.mean_sec, late.measurements, late.valid_measurements) == (pytest.approx(0.005), 2, 1)
    # A trace MetaSchedule rejects never becomes valid.
    store.records.add_tuning_records([_record(workload, '"bad"', [0.001], trace_valid=False)])
    store.records.add_tuning_records([_record(workload, '"bad"', [0.0005], trace_valid=False)])
    bad = next(r for r in store.records.all_records(workload, *SCOPE) if r.trace == '"bad"')
    assert (bad.mean_sec, bad.measurements, bad.valid_measurements) == (None, 2, 0)
    assert [m for _, m, _ in store.records.measurements_of(bad.id)] == [None, None]


def _plan(store: RegistryStore, registry_url: str, workload: int) -> str:
    """The query plan of `top_k_records` for one workload, as the database runs it."""
    statements = []
    engine = store._engine  # the store's own statements, captured as it sends them
    listener = lambda conn, cursor, sql, params, context, many: statements.append((sql, params))  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        store.records.top_k_records(workload, *SCOPE, 5, "warm")  # as a reader asks: within one timing context
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    sql, params = next((s, p) for s, p in statements if "ORDER BY" in s)
    raw = create_engine(parse_registry_url(registry_url))
    try:
        with raw.connect() as connection:
            if raw.dialect.name == "sqlite":
                rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params).all()
                return "\n".join(str(row[-1]) for row in rows)
            # A few rows fit one page, where a scan is cheaper: ask whether the index can serve it.
            connection.exec_driver_sql("SET enable_seqscan = off")
            return "\n".join(row[0] for row in connection.exec_driver_sql("EXPLAIN " + sql, params).all())
    finally:
        raw.dispose()


def test_the_best_records_of_a_workload_come_from_the_index_in_order(store, registry_url, workload):
    store.records.add_tuning_records([_record(workload, f'"t{i}"', [0.001 * (i % 7 + 1)]) for i in range(50)])
    plan = _plan(store, registry_url, workload)
    assert "ix_tuning_records_scope_mean" in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan  # ordered by the index, not sorted after


def test_the_migration_counts_existing_records_as_one_measurement_each(store, registry_url, workload):
    store.records.add_tuning_records([_record(workload, '"ok"', [0.002]), _record(workload, '"failed"', None)])
    store.dispose()
    engine = create_engine(parse_registry_url(registry_url))
    try:
        with engine.begin() as connection:
            command.downgrade(migrate.alembic_config(connection), "0003")
            assert "tuning_measurements" not in {r[0] for r in connection.execute(text(
                "SELECT table_name FROM information_schema.tables" if engine.dialect.name == "postgresql"
                else "SELECT name FROM sqlite_master"))}
            command.upgrade(migrate.alembic_config(connection), "head")
    finally:
        engine.dispose()
    again = RegistryStore(registry_url)
    try:
        by_trace = {r.trace: r for r in again.records.all_records(workload, *SCOPE)}
        assert {t: (r.measurements, r.valid_measurements) for t, r in by_trace.items()} == {
            '"ok"': (1, 1), '"failed"': (1, 0)}
        # Their first measurements are known as such: sent again, they are not counted twice.
        again.records.add_tuning_records([_record(workload, '"ok"', [0.002]), _record(workload, '"failed"', None)])
        assert {r.measurements for r in again.records.all_records(workload, *SCOPE)} == {1}
        assert again.counts()["tuning_measurements"] == 0
    finally:
        again.dispose()
