"""`farm registry prune`, `pin` and `unpin`: on SQLite and PostgreSQL, bad input, a kill mid-prune.

The registries are made with the store's own rows (a prune reads and deletes rows, it never loads
a library), as many as a test needs: one job per artifact, finished and pointing at it, as a
submit leaves them.
"""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from foundation.clock import utc_now
from foundation.registry import RegistryStore
from foundation.registry.engine import parse_registry_url, sqlite_path
from foundation.registry.schema import ArtifactRow, JobRow
from foundation.registry.session import Changes

from support.farm_inprocess import run_farm_inprocess
from support.farm_process import farm_env

TARGET = '{"kind":"llvm"}'
LIBRARY = b"\x7fELF" + bytes(range(256)) * 64  # 16 KiB


def seed(url: str, artifacts: int, *, running_uses: int | None = None) -> list[str]:
    """A registry holding ``artifacts`` artifacts of one scope (oldest first, their ids returned),
    each made by a finished job that points at it; ``running_uses``: a running job points at that one."""
    store = RegistryStore(url)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        store.upsert_model(model_id="m1", name="mlp-tiny", source="zoo", source_digest="d", batch=2, inputs=[],
                           weights=[], num_parameters=0)
        start = utc_now() - timedelta(days=60)
        ids = [f"art-{n:06d}" for n in range(artifacts)]
        with store.unit_of_work.write(Changes.STATE) as session:
            for n, artifact_id in enumerate(ids):
                made = start + timedelta(minutes=n)
                session.add(JobRow(id=f"job-{n:06d}", model_id="m1", target=TARGET, fingerprint_id="cpu-aaaa",
                                   state="succeeded", trials_budget=1, trials_done=1, options={},
                                   artifact_id=artifact_id, created_at=made, finished_at=made))
                session.flush()
                session.add(ArtifactRow(
                    id=artifact_id, model_id="m1", target=TARGET, fingerprint_id="cpu-aaaa", job_id=f"job-{n:06d}",
                    library=LIBRARY, sha256="0" * 64, size=len(LIBRARY), lib_format="so", latency_mean_ms=1.0,
                    latency_median_ms=1.0, latency_std_ms=0.0, validation={"passed": True},
                    validation_passed=True, tvm_version="0.27.0", software={}, created_at=made))
            if running_uses is not None:
                session.add(JobRow(id="job-running", model_id="m1", target=TARGET, fingerprint_id="cpu-aaaa",
                                   state="running", trials_budget=1, trials_done=0, options={},
                                   artifact_id=ids[running_uses], created_at=utc_now()))
        return ids
    finally:
        store.dispose()


def rows(url: str, sql: str) -> list:
    engine = create_engine(parse_registry_url(url))
    try:
        with engine.connect() as connection:
            return [row[0] for row in connection.execute(text(sql))]
    finally:
        engine.dispose()


def artifact_ids(url: str) -> list[str]:
    return rows(url, "SELECT id FROM artifacts ORDER BY id")


def dangling_jobs(url: str) -> list[str]:
    """Jobs naming an artifact that is not there: what a prune must never leave."""
    return rows(url, "SELECT id FROM jobs WHERE artifact_id IS NOT NULL AND artifact_id NOT IN "
                     "(SELECT id FROM artifacts)")


def farm(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_farm_inprocess(*args, home=home)


@pytest.mark.parametrize("option", [["--keep", "0"], ["--keep", "-1"], ["--keep", "1" + "0" * 30],
                                    ["--keep", "1001"], ["--keep", "three"], ["--older-than", "-1"],
                                    ["--older-than", "99999999"]])
def test_a_keep_or_age_out_of_bounds_is_refused_before_the_registry_is_opened(tmp_path, option):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    refused = farm(tmp_path / "home", "registry", "prune", "--registry", url, *option)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("error: ")
    assert option[0] in refused.stderr
    assert not (tmp_path / "registry.db").exists()


def test_a_missing_registry_is_not_found_and_not_created(tmp_path):
    missing = farm(tmp_path / "home", "registry", "prune", "--registry", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.returncode == 3 and missing.stderr.startswith("error: ")
    assert not (tmp_path / "none.db").exists()


def test_pinning_an_unknown_artifact_is_not_found(tmp_path, registry_url):
    seed(registry_url, 1)
    for command in ("pin", "unpin"):
        unknown = farm(tmp_path, "registry", command, "art-nope", "--registry", registry_url)
        assert unknown.returncode == 3, unknown.stderr
        assert unknown.stderr.startswith("error: no artifact 'art-nope' in the registry at ")
        assert unknown.stderr.count("\n") == 1
    garbled = farm(tmp_path, "registry", "pin", "art-\x01" + "x" * 300, "--registry", registry_url)
    assert garbled.returncode == 2 and garbled.stderr.count("\n") == 1


def test_a_dry_run_lists_what_would_go_and_writes_nothing(tmp_path, registry_url):
    ids = seed(registry_url, 6)
    dry = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "2", "--older-than", "30",
               "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert document["planned"] == {"artifacts": 4, "artifact_bytes": 4 * len(LIBRARY), "jobs": 4}
    assert document["deleted"] is None
    assert [a["id"] for a in document["artifacts"]] == ids[:4]
    assert document["artifacts"][0]["model"] == "mlp-tiny" and document["artifacts"][0]["why"].startswith("older")
    assert document["jobs"] == ["job-000000", "job-000001", "job-000002", "job-000003"]
    assert artifact_ids(registry_url) == ids and len(rows(registry_url, "SELECT id FROM jobs")) == 6

    listed = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "2", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:5]] == ids[:4]
    assert f"would delete 4 artifacts ({4 * len(LIBRARY) / 1000:.3g} KB)" in listed.stdout
    assert artifact_ids(registry_url) == ids


def test_prune_keeps_the_newest_the_pinned_and_what_a_running_job_uses(tmp_path, registry_url):
    ids = seed(registry_url, 8, running_uses=1)
    pinned = farm(tmp_path, "registry", "pin", ids[0], "--registry", registry_url, "--json")
    assert pinned.returncode == 0 and json.loads(pinned.stdout)["new"] is True
    listed = json.loads(farm(tmp_path, "registry", "pin", "--registry", registry_url, "--json").stdout)
    assert [p["artifact"] for p in listed["pins"]] == [ids[0]]

    pruned = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "2", "--older-than", "0",
                  "--json")
    assert pruned.returncode == 0, pruned.stderr
    document = json.loads(pruned.stdout)
    assert document["deleted"]["artifacts"] == 4 and document["deleted"]["jobs"] == 4
    assert document["kept"] == {"pinned": 1, "in_use": 1, "hit": 1, "newest": 1}
    assert artifact_ids(registry_url) == [ids[0], ids[1], ids[6], ids[7]]
    assert dangling_jobs(registry_url) == []
    # The jobs that made a kept artifact stay, and so does the running one.
    assert sorted(rows(registry_url, "SELECT id FROM jobs")) == ["job-000000", "job-000001", "job-000006",
                                                                  "job-000007", "job-running"]

    assert farm(tmp_path, "registry", "unpin", ids[0], "--registry", registry_url).returncode == 0
    again = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "2")
    assert again.returncode == 0, again.stderr
    assert artifact_ids(registry_url) == [ids[1], ids[6], ids[7]]


def test_the_freed_space_is_returned_by_vacuum_on_sqlite_and_by_autovacuum_on_postgresql(tmp_path, registry_url):
    seed(registry_url, 40)
    pruned = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "1")
    assert pruned.returncode == 0, pruned.stderr
    vacuumed = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--vacuum", "--json")
    assert vacuumed.returncode == 0, vacuumed.stderr
    space = json.loads(vacuumed.stdout)["space"]
    if registry_url.startswith("sqlite"):
        assert "--vacuum" in pruned.stdout and "VACUUM" in pruned.stdout
        assert space["reclaimed_by"] == "vacuum"
        assert space["file_bytes_after"] < space["file_bytes_before"] - 30 * len(LIBRARY)
        assert sqlite_path(parse_registry_url(registry_url)).stat().st_size == space["file_bytes_after"]
    else:
        assert "autovacuum" in pruned.stdout and space["reclaimed_by"] == "autovacuum"


def test_a_prune_killed_midway_leaves_no_job_naming_a_deleted_artifact(tmp_path, registry_url, farm_exe):
    ids = seed(registry_url, 2_000)
    proc = subprocess.Popen([farm_exe, "registry", "prune", "--registry", registry_url, "--keep", "1"],
                            env=farm_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # killed once a batch, not all, is deleted
        if line.startswith("deleting artifacts"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "the prune ended before it could be killed midway"
    left = artifact_ids(registry_url)
    assert 1 < len(left) < len(ids)
    assert dangling_jobs(registry_url) == []

    rerun = farm(tmp_path, "registry", "prune", "--registry", registry_url, "--keep", "1")
    assert rerun.returncode == 0, rerun.stderr
    assert artifact_ids(registry_url) == [ids[-1]] and dangling_jobs(registry_url) == []
