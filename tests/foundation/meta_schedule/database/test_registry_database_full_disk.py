"""The registry's disk full under MetaSchedule: TVM hands the error back as a RuntimeError of its
text, and the database keeps the farm's own (exit 6) for the tuner to raise again."""

from __future__ import annotations

import pytest

from foundation.errors import OutOfResources
from foundation.meta_schedule.database.registry_database import RegistryDatabase, canonical_target_json
from foundation.registry import RegistryStore

from support.small_disk import fill, small_disk
from support.tvm_records import matmul_module

tvm = pytest.importorskip("tvm")


def test_a_full_disk_met_through_tvm_is_kept_as_the_farms_error(tmp_path):
    from tvm.s_tir.meta_schedule import _ffi_api

    with small_disk(tmp_path / "disk", 1024) as disk:
        store = RegistryStore(f"sqlite:///{disk / 'registry.db'}")
        try:
            store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
            database = RegistryDatabase(store, "cpu-aaaa", canonical_target_json("llvm"))
            fill(disk)
            with pytest.raises(Exception) as raised:
                _ffi_api.DatabaseCommitWorkload(database, matmul_module())  # as MetaSchedule calls it
        finally:
            store.dispose()
    assert not isinstance(raised.value, OutOfResources)  # what TVM made of it
    assert isinstance(database.farm_error, OutOfResources) and database.farm_error.exit_code == 6
    assert str(database.farm_error) in str(raised.value)
