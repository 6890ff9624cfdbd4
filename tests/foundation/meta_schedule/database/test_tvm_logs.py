"""TVM JSONDatabase logs in and out of the registry, with top-k preserved both ways."""

from __future__ import annotations

import json
import os

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


# Times no run gives, as a hand-edited or corrupt log may hold them: refused by line, nothing stored.
# ([null] crashed the process in TVM's from_json.)
IMPOSSIBLE_RUN_SECS = ["[-1.0]", "[NaN]", "[Infinity]", "[-Infinity]", "[]", "[null]", "[0.0]", "[true]",
                       "[1e-3,-1e-3]", "0.5"]


@pytest.mark.parametrize("run_secs", IMPOSSIBLE_RUN_SECS)
def test_a_record_with_impossible_run_times_is_refused_by_line(store, tmp_path, run_secs):
    from support.tvm_logs import small_tvm_log, with_run_secs

    log = small_tvm_log(tmp_path / "log", run_secs=[(1e-3,), (2e-3,), (1e10,)])
    with_run_secs(log / RECORD_FILE, 2, run_secs)
    with pytest.raises(FarmError, match=rf"{RECORD_FILE}:2: its run_secs .* are not run times"):
        import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {})
    assert store.counts()["tuning_records"] == store.counts()["workloads"] == 0


def test_unmeasured_and_failed_records_still_import(store, tmp_path):
    """TVM writes null for a record not measured yet and 1e10 for a failed run: both are kept, neither ranks."""
    from support.tvm_logs import small_tvm_log

    log = small_tvm_log(tmp_path / "log", run_secs=[(1e-3,), None, (1e10,), (1e10, 2e-3)])
    assert import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {}).records == 4
    assert sorted((r.mean_sec is None) for r in store.records.all_records()) == [False, False, True, True]


def test_the_registry_never_ranks_an_impossible_time(store, tmp_path):
    """Under the import's check, the registry's own: a time no run gives is no valid measurement."""
    from foundation.registry import NewRecord
    from foundation.registry.tuning_records import mean_run_sec

    assert [mean_run_sec(s) for s in ([2e-3, 4e-3], [1e10], [-1.0], [float("nan")], [float("inf")], [0.0],
                                       [1e-3, -1e-3], [], None)] == [3e-3] + [None] * 8
    workload = {"shash": "1", "mod": json.dumps({"a": 1})}
    records = [NewRecord(workload_id=0, fingerprint_id="cpu-aaaa", target=TARGET, tvm_version=VERSION,
                         trace=json.dumps([i]), run_secs=secs, args_info=None, software={})
               for i, secs in enumerate([[-1.0], [0.0], [1e-3]])]  # (PostgreSQL's json holds no infinity)
    store.records.import_tuning_log([(workload["shash"], workload["mod"])], records)
    stored = sorted(store.records.all_records(), key=lambda r: r.trace)
    assert [(r.mean_sec, r.valid_measurements) for r in stored] == [(None, 0), (None, 0), (1e-3, 1)]


@pytest.mark.parametrize(("name", "content", "reason"), [
    (WORKLOAD_FILE, b"\xff\xfe\n", "not UTF-8 text"),
    (RECORD_FILE, b"\n\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n", r"not JSON .*\(nested too deeply\)"),
    (RECORD_FILE, "[0, \u00e9\n".encode("latin-1"), "not UTF-8 text"),
])
def test_a_line_python_cannot_read_names_itself(store, tmp_path, name, content, reason):
    from support.tvm_logs import small_tvm_log

    log = small_tvm_log(tmp_path / "log")
    (log / name).write_bytes(content)
    line = 3 if content.startswith(b"\n\n") else 1
    with pytest.raises(FarmError, match=rf"{name}:{line}: {reason}"):
        import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {})
    assert store.counts()["tuning_records"] == store.counts()["workloads"] == 0


def _logs_in(directory):  # type: ignore[no-untyped-def]
    return {p.name: (p.read_text() if p.is_file() else "<dir>") for p in directory.iterdir()}


def test_export_over_a_directory_replaces_neither_log(store, tmp_path):
    out = tmp_path / "out"
    (out / RECORD_FILE).mkdir(parents=True)
    (out / WORKLOAD_FILE).write_text("old\n")
    with pytest.raises(IsADirectoryError) as raised:
        export_tvm_logs(store, out, "cpu-aaaa", TARGET, VERSION)
    assert raised.value.filename == str(out / RECORD_FILE)
    assert _logs_in(out) == {WORKLOAD_FILE: "old\n", RECORD_FILE: "<dir>"}


@pytest.mark.parametrize("failing", ["write", "replace"])
def test_a_failed_export_leaves_both_logs_as_they_were(store, tmp_path, monkeypatch, failing):
    """The second log failing, once the first is written aside or even replaced, undoes the first."""
    import pathlib

    from foundation.meta_schedule.database import tvm_logs

    _tvm_log(tmp_path / "log")
    import_tvm_logs(store, tmp_path / "log", "cpu-aaaa", TARGET, VERSION, {})
    out = tmp_path / "out"
    out.mkdir()
    (out / WORKLOAD_FILE).write_text("old workloads\n")
    (out / RECORD_FILE).write_text("old records\n")
    before = _logs_in(out)

    def refused(real):  # type: ignore[no-untyped-def]
        def call(partial, *args, **kwargs):  # type: ignore[no-untyped-def]
            if str(partial) == f"{out / RECORD_FILE}.partial":  # writing it aside, or renaming it into place
                raise PermissionError(13, "Permission denied", str(partial))
            return real(partial, *args, **kwargs)
        return call

    if failing == "write":
        monkeypatch.setattr(pathlib.Path, "write_text", refused(pathlib.Path.write_text))
    else:
        monkeypatch.setattr(tvm_logs.os, "replace", refused(os.replace))
    with pytest.raises(PermissionError) as raised:
        export_tvm_logs(store, out, "cpu-aaaa", TARGET, VERSION)
    assert raised.value.filename == str(out / RECORD_FILE)  # the log, not its .partial
    assert _logs_in(out) == before
    monkeypatch.undo()
    assert export_tvm_logs(store, out, "cpu-aaaa", TARGET, VERSION) == {"workloads": 2, "records": 6}
    assert sorted(_logs_in(out)) == [RECORD_FILE, WORKLOAD_FILE]
