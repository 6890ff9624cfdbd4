"""`farm registry sync` of a pack holding poisoned records (a convolution's trace filed under each of
mlp-tiny's workloads), into a registry file and into a
real coordinator (ImportPack): the poisoned records are refused, counted and said once; the honest
ones are stored, and a second sync copies nothing new. The records came in as they were, and the
fastest ranked first for its workload (issue 58)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundation.registry import RegistryStore
from foundation.registry.packs import in_memory_registry, write_pack
from foundation.registry.sync import sync_registries

from support.farm_inprocess import run_farm_inprocess
from support.foreign_records import file_foreign_records
from support.served_coordinator import served_coordinator

pytestmark = pytest.mark.slow


def _digests(url: str) -> set[str]:
    store = RegistryStore(url)
    try:
        return {r.record_digest for r in store.records.all_records()}
    finally:
        store.dispose()


# Timed at 1 ns: no kernel's call is that fast; at 10 us: only its trace gives it away.
@pytest.fixture(params=[1e-9, 1e-5], ids=["1ns", "10us"])
def poisoned_pack(request, tuned_mlp_tiny, tmp_path) -> tuple[Path, Path, set[str], int]:
    """(a home, a pack of its registry with poisoned records beside its own, the honest records'
    digests, how many are poisoned); the pack written as an unchecked sync wrote it."""
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    url = f"sqlite:///{home / 'registry.db'}"
    honest = _digests(url)
    poisoned = len(file_foreign_records(url, request.param))
    assert poisoned and honest
    source, pack = RegistryStore(url), in_memory_registry()
    try:
        sync_registries(source, pack)
        write_pack(pack, tmp_path / "poisoned.farmpack", {"command": "test"})
    finally:
        source.dispose()
        pack.dispose()
    return home, tmp_path / "poisoned.farmpack", honest, poisoned


def _says_refused(proc, refused: int) -> None:
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{refused} record(s) were refused" in warnings[0], proc.stderr
    assert "does not replay on the workload" in warnings[0] or "below the" in warnings[0], warnings


def test_a_pack_synced_into_a_registry_file_leaves_its_poisoned_records_out(poisoned_pack, tmp_path):
    home, pack, honest, poisoned = poisoned_pack
    target = tmp_path / "to.db"

    synced = run_farm_inprocess("registry", "sync", str(pack), str(target), "--json", home=home)
    assert synced.returncode == 0, synced.stderr
    copied = json.loads(synced.stdout)["copied"]
    assert copied["skipped"]["refused_records"] == poisoned, copied
    assert copied["records"] == len(honest) and copied["refused_reason"], copied
    _says_refused(synced, poisoned)
    assert _digests(f"sqlite:///{target}") == honest

    again = run_farm_inprocess("registry", "sync", str(pack), str(target), home=home)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("copied nothing") and f"skipped {poisoned} refused records" in again.stdout, again
    _says_refused(again, poisoned)
    assert _digests(f"sqlite:///{target}") == honest


def test_a_pack_synced_into_a_coordinator_leaves_its_poisoned_records_out(poisoned_pack, tmp_path, monkeypatch):
    from foundation.wire.access import ServerAccess

    home, pack, honest, poisoned = poisoned_pack
    served = tmp_path / "served" / "registry.db"
    monkeypatch.setenv("FARM_TOKEN", "sync-test-token")
    with served_coordinator(served.parent, lease_ttl=30.0, access=ServerAccess(token="sync-test-token")) as (server, _):
        sent = run_farm_inprocess("registry", "sync", str(pack), f"grpc://{server.address}", "--json", home=home)
        assert sent.returncode == 0, sent.stderr
        copied = json.loads(sent.stdout)["copied"]
        assert copied["skipped"]["refused_records"] == poisoned and copied["records"] == len(honest), copied
        _says_refused(sent, poisoned)
        assert _digests(f"sqlite:///{served}") == honest
