"""`farm registry sync FROM TO`: a real tuned registry into SQLite and PostgreSQL, filters, a kill
mid-sync, bad FROM and TO.

FROM is the run's tuned home (support.tuned_registry); TO is an empty registry of each backend
(the ``registry_url`` fixture). The kill test grows a copy of FROM with generated records (their
traces need not apply anywhere: they are another TVM version's, whose traces a sync does not replay) so that a real
`farm registry sync` process is still copying when SIGKILL reaches it.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from foundation.registry import NewRecord, RegistryStore
from foundation.registry.engine import parse_registry_url

from support.farm_inprocess import run_farm_inprocess
from support.served_coordinator import served_coordinator

pytestmark = pytest.mark.slow


def farm_here(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm_inprocess(*args, home=home)


def contents(url: str) -> dict[str, list]:
    """What a registry holds, by what each row is (never by local ids): compared across backends."""
    queries = {
        "fingerprints": "SELECT id FROM fingerprints",
        "models": "SELECT id FROM models",
        "jobs": "SELECT id || ':' || state FROM jobs",
        "workloads": "SELECT mod_sha256 FROM workloads",
        "records": "SELECT record_digest || ':' || measurements || ':' || COALESCE(measurement_digest, '') "
                   "FROM tuning_records",
        "measurements": "SELECT measurement_digest FROM tuning_measurements",
        "artifacts": "SELECT id || ':' || sha256 FROM artifacts",
    }
    engine = create_engine(parse_registry_url(url))
    try:
        with engine.connect() as connection:
            return {name: sorted(row[0] for row in connection.execute(text(sql))) for name, sql in queries.items()}
    finally:
        engine.dispose()


@pytest.fixture
def home(tuned_mlp_tiny, tmp_path) -> Path:
    return tuned_mlp_tiny.copy_to(tmp_path / "tuned-home")


def test_sync_copies_everything_a_submit_on_to_is_a_hit_and_a_second_sync_copies_nothing(home, registry_url,
                                                                                         tuned_mlp_tiny):
    source = f"sqlite:///{home / 'registry.db'}"
    first = farm_here(home, "registry", "sync", source, registry_url, "--json")
    assert first.returncode == 0, first.stderr
    copied = json.loads(first.stdout)["copied"]
    assert copied["fingerprints"] >= 1 and copied["records"] > 0 and copied["artifacts"] == 1
    assert contents(registry_url) == contents(source)

    again = farm_here(home, "registry", "sync", source, registry_url, "--json")
    assert again.returncode == 0, again.stderr
    assert {k: v for k, v in json.loads(again.stdout)["copied"].items() if k != "skipped"} == dict.fromkeys(
        copied.keys() - {"skipped"}, 0)

    # And back out of it (PostgreSQL to SQLite, on that backend): the same rows.
    back = home.parent / "back.db"
    assert farm_here(home, "registry", "sync", registry_url, str(back)).returncode == 0
    assert contents(f"sqlite:///{back}") == contents(source)

    hit = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--registry", registry_url, "--json")
    assert hit.returncode == 0, hit.stderr
    answered = json.loads(hit.stdout)
    assert answered["cache_hit"] is True
    assert answered["artifact"]["id"] == tuned_mlp_tiny.submitted["artifact"]["id"]


def test_a_dry_run_writes_nothing_and_filters_narrow_the_copy(home, tmp_path):
    source = f"sqlite:///{home / 'registry.db'}"
    target = tmp_path / "to.db"
    dry = farm_here(home, "registry", "sync", source, str(target), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["copied"]["records"] > 0 and not target.exists()

    other = farm_here(home, "registry", "sync", source, str(target), "--target", "cuda", "--json")
    assert other.returncode == 0, other.stderr
    assert contents(f"sqlite:///{target}")["records"] == [] and contents(f"sqlite:///{target}")["artifacts"] == []
    model = farm_here(home, "registry", "sync", source, str(target), "--model", "mlp-tiny", "--json")
    assert model.returncode == 0, model.stderr
    assert contents(f"sqlite:///{target}")["artifacts"] == contents(source)["artifacts"]


def test_bad_from_and_to_get_one_line_and_leave_to_unchanged(home, tmp_path):
    source = f"sqlite:///{home / 'registry.db'}"
    target = tmp_path / "to.db"
    assert farm_here(home, "registry", "sync", source, str(target)).returncode == 0
    before = contents(f"sqlite:///{target}")
    cases = [
        (("registry", "sync", str(tmp_path / "missing.db"), str(target)), 3, "no registry at"),
        (("registry", "sync", source, str(target), "--model", "no-such-model"), 3, "has no model 'no-such-model'"),
        (("registry", "sync", source, str(target), "--fingerprint", "cpu-000000000000"), 3,
         "has no fingerprint 'cpu-000000000000'"),
        (("registry", "sync", source, source), 4, "FROM and TO are the same registry"),
        (("registry", "sync", str(home / "jobs"), str(target)), None, ""),
    ]
    newer = tmp_path / "newer.db"
    assert farm_here(home, "registry", "sync", source, str(newer)).returncode == 0
    engine = create_engine(f"sqlite:///{newer}")
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    cases += [(("registry", "sync", str(newer), str(target)), 4, "newer than this farm"),
              (("registry", "sync", source, str(newer)), 4, "newer than this farm")]
    for args, code, says in cases:
        proc = farm_here(home, *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and proc.returncode != 70, (args, proc.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
        if code is not None:
            assert proc.returncode == code, (args, proc.stderr)
            assert says in lines[0], (args, lines[0])
    assert contents(f"sqlite:///{target}") == before


def _grown_copy(home: Path, records: int) -> str:
    """FROM with ``records`` more records (several measured twice) on its fingerprint and workloads."""
    url = f"sqlite:///{home / 'registry.db'}"
    store = RegistryStore(url)
    try:
        fingerprint = store.list_fingerprints()[0].id
        workloads = [w for w, _ in store.records.get_workloads(range(1, 100)).items()]
        generated = random.Random(0)
        batch = [NewRecord(workload_id=generated.choice(workloads), fingerprint_id=fingerprint,
                           target='{"kind":"llvm"}', tvm_version="0.27.0", trace=f'["generated",{i}]',
                           run_secs=[generated.uniform(1e-5, 1e-3)]) for i in range(records)]
        store.records.add_tuning_records(batch)
        store.records.add_tuning_records([NewRecord(**{**r.__dict__, "run_secs": [r.run_secs[0] * 1.1]})
                                          for r in batch[::7]])
    finally:
        store.dispose()
    return url


def test_a_sync_killed_midway_then_run_again_equals_a_clean_sync(home, tmp_path, farm_exe):
    source = _grown_copy(home, 20_000)
    clean, killed = tmp_path / "clean.db", tmp_path / "killed.db"
    assert farm_here(home, "registry", "sync", source, str(clean)).returncode == 0

    env = {**os.environ, "FARM_HOME": str(home)}
    proc = subprocess.Popen([farm_exe, "registry", "sync", source, str(killed)], env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 300
    assert proc.stderr is not None
    for line in proc.stderr:  # killed once some record batches, not all, are in
        if line.startswith("tuning records") and int(line.split()[2].replace(",", "")) >= 2_000:
            proc.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the sync ended before it could be killed midway"
    partial = contents(f"sqlite:///{killed}")
    assert 0 < len(partial["records"]) < len(contents(source)["records"])

    rerun = farm_here(home, "registry", "sync", source, str(killed))
    assert rerun.returncode == 0, rerun.stderr
    assert contents(f"sqlite:///{killed}") == contents(f"sqlite:///{clean}") == contents(source)


def test_a_pack_carries_a_registry_and_says_who_made_it(home, tmp_path, registry_url, tuned_mlp_tiny):
    source = f"sqlite:///{home / 'registry.db'}"
    pack = tmp_path / "mlp-tiny.farmpack"
    written = farm_here(home, "registry", "sync", source, str(pack), "--json")
    assert written.returncode == 0, written.stderr
    with gzip.open(pack, "rt") as lines:
        header = json.loads(lines.readline())
    assert header["format"] == "tvm-farm-pack" and header["command"].startswith("farm registry sync")
    assert header["cpu"] and header["created"].startswith("20") and header["tables"]["tuning_records"]["rows"] > 0
    again = farm_here(home, "registry", "sync", source, str(pack), "--json")  # a pack is added to, not rewritten
    assert json.loads(again.stdout)["copied"]["records"] == 0

    read = farm_here(home, "registry", "sync", str(pack), registry_url, "--json")
    assert read.returncode == 0, read.stderr
    assert contents(registry_url) == contents(source)
    hit = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--registry", registry_url, "--json")
    assert json.loads(hit.stdout)["artifact"]["id"] == tuned_mlp_tiny.submitted["artifact"]["id"]


def test_a_damaged_pack_is_refused_whole(home, tmp_path):
    source = f"sqlite:///{home / 'registry.db'}"
    pack, target = tmp_path / "p.farmpack", tmp_path / "to.db"
    assert farm_here(home, "registry", "sync", source, str(pack)).returncode == 0
    with gzip.open(pack, "rb") as packed:
        header, *rows = packed.read().splitlines()
    # A row changed, the file still a well-formed pack: its table's digest no longer matches.
    changed = [row.replace(b'"cores":', b'"cores":1') if b'"fingerprints"' in row else row for row in rows]
    tampered = tmp_path / "tampered.farmpack"
    with gzip.open(tampered, "wb") as packed:
        packed.write(b"\n".join([header, *changed]) + b"\n")
    cut = tmp_path / "cut.farmpack"
    cut.write_bytes(pack.read_bytes()[: pack.stat().st_size // 2])
    for bad, says in [(tampered, "its fingerprints rows do not match the digest"), (cut, "is damaged")]:
        proc = farm_here(home, "registry", "sync", str(bad), str(target))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and says in proc.stderr
    assert not target.exists()
    missing = farm_here(home, "registry", "sync", str(tmp_path / "none.farmpack"), str(target))
    assert missing.returncode == 3 and "no pack at" in missing.stderr


def test_sync_from_and_to_a_coordinator_over_grpc(home, tmp_path, monkeypatch, tuned_mlp_tiny):
    from foundation.wire.access import ServerAccess

    source = f"sqlite:///{home / 'registry.db'}"
    served = tmp_path / "served" / "registry.db"
    monkeypatch.setenv("FARM_TOKEN", "sync-test-token")
    with served_coordinator(served.parent, lease_ttl=30.0, access=ServerAccess(token="sync-test-token")) as (server, _):
        there = f"grpc://{server.address}"
        sent = farm_here(home, "registry", "sync", source, there, "--json")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["copied"]["artifacts"] == 1
        assert contents(f"sqlite:///{served}") == contents(source)
        again = farm_here(home, "registry", "sync", source, there, "--json")
        assert json.loads(again.stdout)["copied"]["records"] == 0

        back = tmp_path / "back.db"
        fetched = farm_here(home, "registry", "sync", there, str(back), "--json")
        assert fetched.returncode == 0, fetched.stderr
        assert contents(f"sqlite:///{back}") == contents(source)
        hit = farm_here(home, "submit", "mlp-tiny", "llvm", "2", "--registry", f"sqlite:///{back}", "--json")
        assert json.loads(hit.stdout)["artifact"]["id"] == tuned_mlp_tiny.submitted["artifact"]["id"]

        monkeypatch.setenv("FARM_TOKEN", "not-the-token")
        refused = farm_here(home, "registry", "sync", there, str(tmp_path / "never.db"))
        assert refused.returncode == 2 and "token" in refused.stderr, refused.stderr  # as every command says it
        assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "never.db").exists()
