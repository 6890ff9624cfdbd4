"""TVM JSONDatabase logs in and out of the registry, with top-k preserved both ways."""

from __future__ import annotations

import json

import pytest

from foundation.errors import FarmError
from foundation.meta_schedule.database.registry_database import RegistryDatabase, canonical_target_json
from foundation.meta_schedule.database.tvm_logs import (
    RECORD_FILE,
    WORKLOAD_FILE,
    export_tvm_logs,
    import_tvm_logs,
)

from support.tvm_records import matmul_module, tuning_record

tvm = pytest.importorskip("tvm")
from tvm.s_tir import meta_schedule as ms  # noqa: E402

TARGET = canonical_target_json("llvm")
VERSION = tvm.__version__


def _tvm_log(work_dir):  # type: ignore[no-untyped-def]
    """A JSONDatabase as MetaSchedule leaves it: two workloads, valid and failed records."""
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    big, small = (
        database.commit_workload(matmul_module(64)),
        database.commit_workload(matmul_module(32)),
    )
    for factor, secs in [(2, [3e-3]), (4, [1e-3, 1.2e-3]), (8, None), (16, [1e10]), (1, [5e-3])]:
        database.commit_tuning_record(tuning_record(big, factor, secs))
    database.commit_tuning_record(tuning_record(small, 4, [2e-4]))
    return database


def _summary(records):  # type: ignore[no-untyped-def]
    return [
        (json.dumps(r.as_json()[0], sort_keys=True), [float(v) for v in r.run_secs])
        for r in records
    ]


def test_import_keeps_top_k_and_skips_what_it_already_has(store, tmp_path):
    original = _tvm_log(tmp_path / "log")
    report = import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {"llvm": "x"})
    assert (report.workloads, report.records, report.skipped_duplicates) == (2, 6, 0)
    again = import_tvm_logs(
        store,
        (tmp_path / "log" / WORKLOAD_FILE, tmp_path / "log" / RECORD_FILE),
        "cpu-aaaa",
        TARGET,
        VERSION,
        {},
    )
    assert (again.records, again.skipped_duplicates) == (0, 6)
    assert store.counts()["workloads"] == 2

    database = RegistryDatabase(store, "cpu-aaaa", TARGET, VERSION, {})
    for n in (64, 32):
        ours = database.get_top_k(database.commit_workload(matmul_module(n)), 10)
        theirs = original.get_top_k(original.commit_workload(matmul_module(n)), 10)
        assert _summary(ours) == _summary(theirs) and ours
    assert len(database) == len(original) == 6


def test_live_records_and_imported_ones_are_the_same_records(store, tmp_path):
    """A trace tuned live and then imported from a log is stored once."""
    database = RegistryDatabase(store, "cpu-aaaa", TARGET, VERSION, {})
    workload = database.commit_workload(matmul_module(64))
    database.commit_tuning_record(tuning_record(workload, 4, [1e-3, 1.2e-3]))
    database.flush()
    _tvm_log(tmp_path / "log")
    report = import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    assert (report.records, report.skipped_duplicates) == (5, 1)
    assert store.counts()["workloads"] == 2


def test_export_loads_back_into_tvm(store, tmp_path):
    original = _tvm_log(tmp_path / "log")
    import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    counts = export_tvm_logs(store, tmp_path / "out", "cpu-aaaa", TARGET, VERSION)
    assert counts == {"workloads": 2, "records": 6}
    exported = ms.database.JSONDatabase(work_dir=str(tmp_path / "out"), allow_missing=False)
    assert len(exported) == 6
    for n in (64, 32):
        mod = matmul_module(n)
        ours = exported.get_top_k(exported.commit_workload(mod), 10)
        theirs = original.get_top_k(original.commit_workload(mod), 10)
        assert _summary(ours) == _summary(theirs)
        assert all(str(r.target.kind.name) == "llvm" for r in ours)
    assert export_tvm_logs(store, tmp_path / "none", "cpu-aaaa", TARGET, "0.1.0") == {
        "workloads": 0,
        "records": 0,
    }


def test_export_gives_tvm_the_mean_of_a_record_measured_again(store, tmp_path):
    """TVM ranks a record by the mean of its run_secs: the farm's merged mean, not the first measurement."""
    database = RegistryDatabase(store, "cpu-aaaa", TARGET, VERSION, {})
    workload = database.commit_workload(matmul_module(64))
    database.commit_tuning_record(tuning_record(workload, 4, [1e-3]))
    database.flush()
    database.commit_tuning_record(tuning_record(workload, 4, [3e-3]))
    database.commit_tuning_record(tuning_record(workload, 8, [1.5e-3]))
    database.flush()
    assert export_tvm_logs(store, tmp_path / "out", "cpu-aaaa", TARGET, VERSION)["records"] == 2
    exported = ms.database.JSONDatabase(work_dir=str(tmp_path / "out"), allow_missing=False)
    best = exported.get_top_k(exported.commit_workload(matmul_module(64)), 2)
    # Measured 1 then 3 ms, the tile-4 record is 2 ms to the farm: slower than tile 8's 1.5 ms.
    assert [[float(s) for s in r.run_secs] for r in best] == [[1.5e-3], [pytest.approx(2e-3)]]


def test_a_broken_line_names_itself_and_writes_nothing(store, tmp_path):
    _tvm_log(tmp_path / "log")
    records = tmp_path / "log" / RECORD_FILE
    lines = records.read_text().splitlines()
    records.write_text("\n".join(lines[:3] + ['[0, ["not a trace"]]'] + lines[3:]) + "\n")
    with pytest.raises(FarmError, match=rf"{RECORD_FILE}:4: not a TVM tuning record"):
        import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    records.write_text("\n".join(lines[:2] + ["{oops"]) + "\n")
    with pytest.raises(FarmError, match=rf"{RECORD_FILE}:3: not JSON"):
        import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    records.write_text("\n".join(lines + ["[7, " + lines[0].split(",", 1)[1]]) + "\n")
    with pytest.raises(FarmError, match=r":7: .*workload index 7"):
        import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    with pytest.raises(FarmError, match="no TVM tuning log"):
        import_tvm_logs(store, tmp_path / "missing", "cpu-aaaa", TARGET, VERSION, {})
    assert store.counts()["tuning_records"] == store.counts()["workloads"] == 0


def test_unknown_fingerprint_rolls_back_the_import(store, tmp_path):
    _tvm_log(tmp_path / "log")
    with pytest.raises(FarmError, match="refused a write"):
        import_tvm_logs(store, tmp_path / "log", "cpu-unknown", TARGET, VERSION, {})
    assert store.counts()["tuning_records"] == store.counts()["workloads"] == 0


def test_layout_rewrites_go_out_to_tvm_and_back_in(store, tmp_path):
    """Prepacked workloads' records (a TransformLayout with an IndexMap) through TVM's own log format."""
    from support.tvm_records import layout_rewrite_record

    (tmp_path / "log").mkdir()
    log = ms.database.JSONDatabase(work_dir=str(tmp_path / "log"))
    workload = log.commit_workload(matmul_module(64))
    log.commit_tuning_record(layout_rewrite_record(workload, 4, [1e-3]))
    log.commit_tuning_record(layout_rewrite_record(workload, 8, [2e-3]))
    report = import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {"llvm": "x"})
    assert (report.workloads, report.records) == (1, 2)
    assert export_tvm_logs(store, tmp_path / "out", "cpu-aaaa")["records"] == 2
    back = ms.database.JSONDatabase(work_dir=str(tmp_path / "out"))
    target = tvm.target.Target("llvm")
    tvm.ir.assert_structural_equal(back.query_ir_module(matmul_module(64), target, "main"),
                                   log.query_ir_module(matmul_module(64), target, "main"))
