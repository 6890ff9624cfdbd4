"""`farm jobs --state STATE --model NAME`: the registry's jobs and a coordinator's, filtered the same way."""

from __future__ import annotations

import json

import pytest

from coordinator.server import serve
from foundation.registry import RegistryStore

from support.farm_inprocess import run_farm_inprocess

# (model, state) of the jobs the registry holds, oldest first.
JOBS = [("mlp-tiny", "succeeded"), ("mlp-tiny", "failed"), ("resnet-18", "failed"), ("resnet-18", "cancelled"),
        ("mlp-tiny", "cancelled")]


@pytest.fixture
def registry_jobs(registry_url) -> dict[tuple[str, str], str]:
    """A registry holding JOBS; their ids by (model, state)."""
    store = RegistryStore(registry_url, create=True)
    try:
        store.upsert_fingerprint("cpu-aaaa", "cpu", "test cpu", {})
        for name in {model for model, _ in JOBS}:
            store.upsert_model(model_id=f"model-{name}", name=name, source="zoo", source_digest="v1", batch=1,
                               inputs=[], weights=[], num_parameters=1)
        return {(model, state): store.create_job(model_id=f"model-{model}", target='{"kind":"llvm"}',
                                                 fingerprint_id="cpu-aaaa", trials_budget=0, options={},
                                                 state=state).id
                for model, state in JOBS}
    finally:
        store.dispose()


@pytest.fixture
def coordinator_address(tmp_path, registry_url, registry_jobs) -> str:
    server = serve(listen="127.0.0.1:0", registry_url=registry_url, tracker="127.0.0.1:9190",
                   heartbeat_interval=0.5, lease_ttl=30.0, tick_interval=0.1, data_dir=tmp_path / "coordinator")
    yield server.address
    server.stop(grace=1)


def _listed(tmp_path, *args: str, env=None) -> set[tuple[str, str]]:
    result = run_farm_inprocess("jobs", "--json", *args, home=tmp_path / "home", env=env)
    assert result.returncode == 0, result.stderr
    return {(job["model"], job["state"]) for job in json.loads(result.stdout)}


def test_the_registrys_jobs_are_filtered_by_state_and_model(tmp_path, registry_url, registry_jobs):
    where = ("--registry", registry_url)
    assert _listed(tmp_path, *where) == set(JOBS)
    assert _listed(tmp_path, *where, "--state", "failed") == {("mlp-tiny", "failed"), ("resnet-18", "failed")}
    assert _listed(tmp_path, *where, "--model", "resnet-18") == {("resnet-18", "failed"), ("resnet-18", "cancelled")}
    assert _listed(tmp_path, *where, "--state", "CANCELLED", "--model", "mlp-tiny") == {("mlp-tiny", "cancelled")}
    assert _listed(tmp_path, *where, "--state", "failed", "--state", "succeeded", "--model", "mlp-tiny") == {
        ("mlp-tiny", "failed"), ("mlp-tiny", "succeeded")}
    assert _listed(tmp_path, *where, env={"FARM_JOBS_STATE": "failed cancelled", "FARM_JOBS_MODEL": "resnet-18"}) == {
        ("resnet-18", "failed"), ("resnet-18", "cancelled")}
    assert _listed(tmp_path, *where, "--model", "vgg-11") == set()


def test_no_match_is_said_in_words(tmp_path, registry_url, registry_jobs):
    result = run_farm_inprocess("jobs", "--registry", registry_url, "--state", "running", "--model", "mlp-tiny",
                                home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("no running jobs of mlp-tiny in the registry at ")


def test_a_coordinators_jobs_are_filtered_by_state_and_model(tmp_path, coordinator_address):
    where = ("--coordinator", coordinator_address)
    assert _listed(tmp_path, *where) == set(JOBS)
    assert _listed(tmp_path, *where, "--state", "cancelled") == {("mlp-tiny", "cancelled"), ("resnet-18", "cancelled")}
    assert _listed(tmp_path, *where, "--state", "failed", "--model", "resnet-18") == {("resnet-18", "failed")}
    assert _listed(tmp_path, *where, "--model", "vgg-11") == set()


@pytest.mark.parametrize("args", [["--state", "done"], ["--state", "failed", "--state", ""]])
def test_an_unknown_state_is_refused_naming_the_states(tmp_path, args):
    result = run_farm_inprocess("jobs", *args, home=tmp_path / "home")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --state ")
    assert "queued, running, building, validating, succeeded, failed, cancelled" in result.stderr


def test_an_overlong_model_name_is_refused(tmp_path):
    result = run_farm_inprocess("jobs", "--model", "m" * 300, home=tmp_path / "home")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: --model is 300 characters long")
