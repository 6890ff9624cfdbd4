"""`farm registry show`: per fingerprint, what the registry holds; one fingerprint in full."""

from __future__ import annotations

import json

from foundation.registry import NewRecord, RegistryStore

from support.farm_inprocess import run_farm_inprocess


def test_show_lists_what_each_fingerprint_holds(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    store = RegistryStore(url)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "first cpu", {"cores": 2})
        store.upsert_fingerprint("cpu-bbbb", "cpu", "second cpu", {})
        workload = store.records.commit_workload("1", '["1","YQ=="]')
        store.records.add_tuning_records([
            NewRecord(workload_id=workload, fingerprint_id="cpu-aaaa", target='{"kind":"llvm"}',
                      tvm_version="0.27.0", trace=f'"t{i}"', run_secs=[0.001 * (i + 1)])
            for i in range(1200)])
    finally:
        store.dispose()

    def farm(*args: str):  # the real `farm` script, in this process
        return run_farm_inprocess(*args, home=tmp_path / "home")

    listed = farm("registry", "show", "--registry", url)
    assert listed.returncode == 0, listed.stderr
    header, first, second = listed.stdout.splitlines()
    assert header.split()[:9] == ["FINGERPRINT", "KIND", "RECORDS", "VALID", "WORKLOADS", "MODELS", "ARTIFACTS",
                                  "COST", "MODELS"]
    assert first.split()[:8] == ["cpu-aaaa", "cpu", "1,200", "1,200", "1", "0", "0", "0"]
    assert second.split()[:3] == ["cpu-bbbb", "cpu", "0"]

    document = json.loads(farm("registry", "show", "--registry", url, "--json").stdout)
    assert [(f["id"], f["records"], f["workloads"], f["cost_models"]) for f in document["fingerprints"]] == [
        ("cpu-aaaa", 1200, 1, 0), ("cpu-bbbb", 0, 0, 0)]

    one = json.loads(farm("registry", "show", "cpu-aaaa", "--registry", url, "--json").stdout)
    assert one["details"] == {"cores": 2} and one["holds"]["records"] == 1200 and one["holds"]["artifacts"] == 0
    missing = farm("registry", "show", "cpu-zzzz", "--registry", url)
    assert missing.returncode == 3 and "nothing in the registry has id 'cpu-zzzz'" in missing.stderr
