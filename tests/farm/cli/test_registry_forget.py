"""`farm registry forget`, and `farm submit` on a registry that holds records no job can use (issue 58, bug 1).

A convolution's trace filed under each of a model's tasks, timed at 1 ns, failed every later
submit of the model, `--retune` too, and no command removed it. The submit runs as a real
process on a copy of a home where mlp-tiny was tuned for real; the choosing and bad input run
on registries made of the store's own rows, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from foundation.registry import NewRecord, RegistryStore
from foundation.registry.schema import JobTaskRow
from foundation.registry.session import Changes

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import run_farm
from support.foreign_records import file_foreign_records

TARGET = '{"kind":"llvm"}'


def farm(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm_inprocess(*args, home=home)


def record_ids(url: str) -> list[int]:
    store = RegistryStore(url, create=False)
    try:
        return [r.id for r in store.records.all_records()]
    finally:
        store.dispose()


@pytest.mark.slow
def test_a_poisoned_registry_still_submits_and_forget_removes_what_no_job_can_use(tuned_mlp_tiny, farm_exe, tmp_path):
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    url = f"sqlite:///{home / 'registry.db'}"
    honest = record_ids(url)
    poisoned = file_foreign_records(url)
    assert poisoned and not set(poisoned) & set(honest)

    submitted = run_farm(farm_exe, home, "submit", "mlp-tiny", "llvm", "2", "--retune", "--trials", "4",
                         "--trials-per-task", "2", "--runs", "2", "--json")
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["state"] == "succeeded"
    warned = [line for line in submitted.stderr.splitlines() if "is left out" in line]
    assert warned and all("farm registry forget --record " in line for line in warned), submitted.stderr
    assert {int(line.split("tuning record ")[1].split()[0]) for line in warned} <= set(poisoned), warned

    dry = farm(home, "registry", "forget", "--unusable", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert [r["id"] for r in document["records"]] == poisoned
    assert all(r["why"].startswith("its trace does not replay on the workload") for r in document["records"])
    assert document["removed"] is None and document["checked"] == len(record_ids(url))
    assert set(poisoned) <= set(record_ids(url))

    forgot = farm(home, "registry", "forget", "--unusable")
    assert forgot.returncode == 0, forgot.stderr
    assert f"removed {len(poisoned)} unusable records of the {document['checked']} checked" in forgot.stdout
    kept = record_ids(url)
    assert not set(poisoned) & set(kept) and set(honest) <= set(kept)
    again = json.loads(farm(home, "registry", "forget", "--unusable", "--json").stdout)
    assert again["records"] == [] and again["removed"] is None


@pytest.fixture
def rows(registry_url):  # type: ignore[no-untyped-def]
    """Two fingerprints' records of three workloads; model m1 (mlp batch 1) planned w1 on a
    coordinator and measured w2 embedded; model m2 (mlp batch 2) tuned nothing. The first record
    was measured twice."""
    store = RegistryStore(registry_url)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        store.upsert_fingerprint("cpu-bbbb", "cpu", "other cpu", {})
        w1, w2, w3 = (store.records.commit_workload(str(n), f'["{n}","bW9k{n}"]') for n in (1, 2, 3))
        for model_id, batch in (("m1", 1), ("m2", 2)):
            store.upsert_model(model_id=model_id, name="mlp", source="zoo", source_digest="d", batch=batch,
                               inputs=[], weights=[], num_parameters=0)
        planned, embedded = (store.create_job(model_id="m1", target=TARGET, fingerprint_id="cpu-aaaa",
                                              trials_budget=1, options={}) for _ in range(2))
        with store.unit_of_work.write(Changes.STATE) as session:
            session.add(JobTaskRow(job_id=planned.id, index=0, name="dense", weight=1, flop=1.0, workload_shash="1",
                                   mod_json="{}", workload_id=w1, trials_budget=1))

        def record(workload_id, trace, run_secs, fingerprint_id="cpu-aaaa", job_id=None):  # type: ignore[no-untyped-def]
            return NewRecord(workload_id=workload_id, fingerprint_id=fingerprint_id, target=TARGET,
                             tvm_version="0.27.0", trace=trace, run_secs=run_secs, job_id=job_id)

        store.records.add_tuning_records([record(w1, '["a"]', [1e-5]), record(w2, '["b"]', [2e-5], job_id=embedded.id),
                                          record(w3, '["c"]', [3e-5]), record(w1, '["a"]', [1e-5], "cpu-bbbb")])
        store.records.add_tuning_records([record(w1, '["a"]', [1.5e-5])])
        ids = {(r.workload_id, r.fingerprint_id): r.id for r in store.records.all_records()}
        return registry_url, (w1, w2, w3), ids
    finally:
        store.dispose()


def test_records_are_chosen_by_model_listed_and_left_on_a_dry_run(tmp_path, rows):
    url, (w1, w2, _w3), ids = rows
    for model in (["--model", "m1"], ["--model", "mlp", "--batch", "1"]):
        dry = farm(tmp_path, "registry", "forget", *model, "--fingerprint", "cpu-aaaa", "--registry", url, "--dry-run",
                   "--json")
        assert dry.returncode == 0, dry.stderr
        document = json.loads(dry.stdout)
        assert [r["id"] for r in document["records"]] == sorted([ids[(w1, "cpu-aaaa")], ids[(w2, "cpu-aaaa")]])
        assert document["removed"] is None and document["checked"] is None and document["fingerprint"] == "cpu-aaaa"
    listed = farm(tmp_path, "registry", "forget", "--model", "mlp", "--fingerprint", "cpu-aaaa", "--registry", url,
                  "--dry-run")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["RECORD", "WORKLOAD", "TARGET"]
    assert [int(line.split()[0]) for line in lines[1:3]] == sorted([ids[(w1, "cpu-aaaa")], ids[(w2, "cpu-aaaa")]])
    assert "would remove 2 records of fingerprint cpu-aaaa (dry run: nothing removed)" in listed.stdout
    assert len(record_ids(url)) == 4
    nothing = farm(tmp_path, "registry", "forget", "--model", "mlp", "--batch", "2", "--fingerprint", "cpu-aaaa",
                   "--registry", url)
    assert nothing.returncode == 0 and "nothing to remove" in nothing.stderr


def test_records_go_with_their_measurements_and_others_stay(tmp_path, rows):
    url, (w1, w2, w3), ids = rows
    forgot = farm(tmp_path, "registry", "forget", "--workload", str(w1), "--record", str(ids[(w3, "cpu-aaaa")]),
                  "--fingerprint", "cpu-aaaa", "--registry", url, "--json")
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["removed"] == {"records": 2, "measurements": 1}
    assert sorted(record_ids(url)) == sorted([ids[(w1, "cpu-bbbb")], ids[(w2, "cpu-aaaa")]])


@pytest.mark.parametrize(("args", "code", "says"), [
    ([], 2, "say which records to forget"),
    (["--batch", "1", "--unusable"], 2, "--batch narrows --model"),
    (["--record", "-1"], 2, "--record must be 0 to"),
    (["--workload", "1" + "0" * 30], 2, "--workload must be 0 to"),
    (["--record", "999"], 3, "the registry has no tuning record 999"),
    (["--workload", "999"], 3, "the registry has no workload 999"),
    (["--model", "nope"], 3, "the registry has no model 'nope'"),
    (["--model", "mlp", "--batch", "5"], 3, "the registry has no model 'mlp' at batch 5"),
    (["--record", "1", "--fingerprint", "cpu-zzzz"], 3, "fingerprint 'cpu-zzzz' is not in the registry"),
])
def test_what_cannot_be_forgotten_is_one_line_and_removes_nothing(tmp_path, rows, args, code, says):
    url, _workloads, _ids = rows
    fingerprint = [] if "--fingerprint" in args else ["--fingerprint", "cpu-aaaa"]
    refused = farm(tmp_path, "registry", "forget", *args, *fingerprint, "--registry", url)
    assert refused.returncode == code, refused.stderr
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1, refused.stderr
    assert says in refused.stderr
    assert len(record_ids(url)) == 4


def test_a_record_of_another_fingerprint_is_named_with_the_one_to_give(tmp_path, rows):
    url, (w1, _w2, _w3), ids = rows
    refused = farm(tmp_path, "registry", "forget", "--record", str(ids[(w1, "cpu-bbbb")]), "--fingerprint",
                   "cpu-aaaa", "--registry", url)
    assert refused.returncode == 3, refused.stderr
    assert "is not of fingerprint cpu-aaaa but of cpu-bbbb (give --fingerprint cpu-bbbb" in refused.stderr
    assert len(record_ids(url)) == 4
