"""A long TVM log imported: streamed line by line, told on stderr as it goes, in bounded memory."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from foundation.meta_schedule.database.tvm_logs import PROGRESS_FROM_BYTES, read_tvm_logs, store_tvm_logs

from support.farm_inprocess import run_farm_inprocess
from support.tvm_logs import long_tvm_log, this_box_llvm_target

pytestmark = pytest.mark.slow


def test_a_long_log_is_imported_whole_and_says_how_it_goes(tmp_path):
    log = long_tvm_log(tmp_path / "log", 3500)
    assert (log / "database_tuning_record.json").stat().st_size >= PROGRESS_FROM_BYTES
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    proc = run_farm_inprocess("registry", "import", str(log), "--registry", url, home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    told = proc.stderr.splitlines()
    checking = [line for line in told if "] checking " in line]
    storing = [line for line in told if "] storing " in line]
    assert checking[-1].endswith("3,500 records (100%)") and len(checking) > 2, proc.stderr
    assert storing[-1].endswith("3,500 of 3,500 records (100%)") and len(storing) > 2, proc.stderr
    assert "imported 6 new records" in proc.stdout and "3494 new measurements" in proc.stdout, proc.stdout
    again = run_farm_inprocess("registry", "import", str(log), "--registry", url, "--json", home=tmp_path / "home")
    assert again.returncode == 0 and again.stderr == "", again.stderr  # --json: no progress
    assert json.loads(again.stdout)["skipped_duplicates"] == 3500


def test_a_long_log_is_read_and_stored_in_memory_well_below_its_size(tmp_path):
    from foundation.meta_schedule.database.registry_database import canonical_target_json
    from foundation.registry import RegistryStore

    log = long_tvm_log(tmp_path / "log", 10000)
    size = (log / "database_tuning_record.json").stat().st_size
    store = RegistryStore(f"sqlite:///{tmp_path / 'registry.db'}")
    store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
    target = canonical_target_json(this_box_llvm_target())
    tracemalloc.start()
    try:  # Python's own allocations: what a log held whole (its lines parsed, its records) takes
        report = store_tvm_logs(store, read_tvm_logs(log, "cpu-aaaa", target, "0.27", {}))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        store.dispose()
    print(f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB log")
    assert report.records + report.measurements == 10000
    assert peak < size / 2, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB log"
