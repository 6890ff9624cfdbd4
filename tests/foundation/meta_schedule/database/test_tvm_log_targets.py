"""A TVM log's records are filed under a fingerprint only when they were tuned for its target, and
an import counts what it really added: new records, new measurements of known ones, duplicates."""

from __future__ import annotations

import pytest

from foundation.meta_schedule.database.registry_database import RegistryDatabase, canonical_target_json
from foundation.meta_schedule.database.tvm_logs import import_tvm_logs

from support.tvm_records import matmul_module, tuning_record

tvm = pytest.importorskip("tvm")
from tvm.s_tir import meta_schedule as ms  # noqa: E402

OURS = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
FOREIGN = {"kind": "llvm", "mcpu": "znver4", "num-cores": 4}
TARGET = canonical_target_json(OURS)
VERSION = tvm.__version__


def _log(work_dir, records):  # type: ignore[no-untyped-def]
    """A JSONDatabase of one workload: (split factor, run_secs, target) per record."""
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    workload = database.commit_workload(matmul_module(64))
    for factor, secs, target in records:
        database.commit_tuning_record(tuning_record(workload, factor, secs, target=target))
    return work_dir


def test_a_log_of_another_cpu_is_filed_as_seeds_never_as_this_fingerprints(store, tmp_path):
    log = _log(tmp_path / "log", [(2, [3e-3], FOREIGN), (4, [1e-3], FOREIGN)])
    report = import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {})
    assert (report.records, report.seeds, report.refused_foreign) == (0, 2, 2)
    (seed_fp,) = report.seed_fingerprints
    assert seed_fp.startswith("cpu-log-") and '"znver4"' in report.foreign_target
    filed = store.get_fingerprint(seed_fp)
    assert filed.details["llvm_mcpu"] == "znver4" and filed.details["source"] == "imported TVM log"
    assert len(RegistryDatabase(store, "cpu-aaaa", TARGET, VERSION, {})) == 0
    assert store.records.count_records(fingerprint_id=seed_fp) == 2
    again = import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {})
    assert (again.seeds, again.skipped_duplicates) == (0, 2)


def test_foreign_records_of_a_mixed_log_are_seeds_and_counted(store, tmp_path):
    log = _log(tmp_path / "log", [(2, [3e-3], OURS), (4, [1e-3], FOREIGN), (8, [2e-3], FOREIGN)])
    report = import_tvm_logs(store, log, "cpu-aaaa", TARGET, VERSION, {})
    assert (report.records, report.measurements, report.skipped_duplicates, report.seeds) == (1, 0, 0, 2)
    assert "mcpu" in report.foreign_target
    database = RegistryDatabase(store, "cpu-aaaa", TARGET, VERSION, {})
    assert len(database) == 1


def test_a_target_that_only_leaves_the_hosts_triple_unset_is_this_fingerprints(store, tmp_path):
    from tvm.target import codegen

    spelled = canonical_target_json({**OURS, "mtriple": str(codegen.llvm_get_system_triple())})
    other_vendor = {**OURS, "mtriple": "x86_64-someone-linux-gnu"} if codegen.llvm_get_system_triple().startswith(
        "x86_64") else OURS
    log = _log(tmp_path / "log", [(2, [3e-3], OURS), (4, [1e-3], other_vendor)])
    report = import_tvm_logs(store, log, "cpu-aaaa", spelled, VERSION, {})
    assert (report.records, report.seeds) == (2, 0)


def test_the_summary_counts_what_was_really_added(store, tmp_path):
    _log(tmp_path / "first", [(2, [3e-3], OURS), (4, [1e-3], OURS)])
    assert import_tvm_logs(store, tmp_path / "first", "cpu-aaaa", TARGET, VERSION, {}).records == 2
    again = import_tvm_logs(store, tmp_path / "first", "cpu-aaaa", TARGET, VERSION, {})
    assert (again.records, again.measurements, again.skipped_duplicates) == (0, 0, 2)
    # The same schedules with other timings: not duplicates, but new measurements of known records.
    _log(tmp_path / "edited", [(2, [9e-3], OURS), (4, [8e-3], OURS)])
    edited = import_tvm_logs(store, tmp_path / "edited", "cpu-aaaa", TARGET, VERSION, {})
    assert (edited.records, edited.measurements, edited.skipped_duplicates) == (0, 2, 0)
