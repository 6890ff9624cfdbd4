"""One validation of what a submit asks (foundation.domain.submission.asked_submission): `farm submit` (a real
process), farm.submit and a coordinator's Submit refuse the same values with the same bounds, each naming the value
as its caller spells it, on a registry that holds the model's library too, and nothing is written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import grpc
import pytest

import farm
from coordinator.server import serve
from foundation.errors import BadInput, FarmError
from foundation.wire import farm_pb2, farm_pb2_grpc

# (farm submit's options, farm.submit's arguments, the wire's fields (None: embedded only), each caller's name for
# the value, what every refusal says of it). mlp-tiny llvm 2 is a registry hit in the tuned home.
OUT_OF_RANGE = [
    (["--trials", "2000000"], dict(trials=2_000_000), dict(trials=2_000_000), ("--trials", "trials", "trials"),
     "1 to 1,000,000, got 2000000"),
    (["--trials-per-task", "200000"], dict(trials_per_task=200_000), dict(trials_per_task=200_000),
     ("--trials-per-task", "trials_per_task", "trials_per_task"), "1 to 100,000, got 200000"),
    (["--seed", "4294967296"], dict(seed=2**32), dict(seed=2**32), ("--seed", "seed", "seed"),
     "0 to 4,294,967,295, got 4294967296"),
    (["--runs", "2000000"], dict(runs=2_000_000), dict(validation_runs=2_000_000),
     ("--runs", "runs", "validation_runs"), "1 to 1,000,000, got 2000000"),
    (["--build-workers", "5000"], dict(build_workers=5000), None, ("--build-workers", "build_workers", None),
     "1 to 1,024, got 5000"),
    (["--until", "20ms", "--patience", "5000"], dict(until="20ms", patience=5000),
     dict(until=farm_pb2.Until(goal="20ms", patience=5000)), ("--patience", "patience", "until.patience"),
     "1 to 1,000, got 5000"),
]


def _jobs(registry_file) -> int:
    with sqlite3.connect(registry_file) as connection:
        (count,) = connection.execute("SELECT count(*) FROM jobs").fetchone()
    connection.close()
    return count


@pytest.fixture
def hit_home(tuned_mlp_tiny, tmp_path):
    """A farm home whose registry answers `farm submit mlp-tiny llvm 2`."""
    return tuned_mlp_tiny.copy_to(tmp_path / "home")


@pytest.fixture
def coordinator(hit_home, tmp_path):
    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{hit_home / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator")
    yield server
    server.stop(grace=1)


@pytest.mark.parametrize(("options", "arguments", "fields", "names", "says"), OUT_OF_RANGE,
                         ids=[names[1] for *_, names, _says in OUT_OF_RANGE])
def test_a_value_out_of_range_is_refused_by_the_cli_the_api_and_the_coordinator_on_a_registry_hit(
        hit_home, coordinator, farm_exe, options, arguments, fields, names, says):
    """farm.submit took them on a registry hit and wrote them into a job row (trials=0 on a miss: an untuned
    library stored as the model's artifact)."""
    registry_file = hit_home / "registry.db"
    jobs_before = _jobs(registry_file)
    env = {**os.environ, "FARM_HOME": str(hit_home)}
    env.pop("FARM_REGISTRY", None)
    cli = subprocess.run([farm_exe, "submit", "mlp-tiny", "llvm", "2", *options], env=env, capture_output=True,
                         text=True, timeout=120)
    assert cli.returncode == 2, cli.stderr
    assert cli.stderr.startswith(f"error: {names[0]} must be ") and says in cli.stderr, cli.stderr
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    with pytest.raises(BadInput) as api:
        farm.submit("mlp-tiny", "llvm", 2, registry=f"sqlite:///{registry_file}", **arguments)
    assert str(api.value).startswith(f"{names[1]} must be ") and says in str(api.value)
    assert api.value.exit_code == 2
    if fields is not None:
        with grpc.insecure_channel(coordinator.address) as channel, pytest.raises(grpc.RpcError) as wire:
            farm_pb2_grpc.FarmClientStub(channel).Submit(
                farm_pb2.SubmitRequest(zoo_name="mlp-tiny", target="llvm", batch=2, **fields), timeout=30)
        assert wire.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert wire.value.details().startswith(f"{names[2]} must be ") and says in wire.value.details()
    assert _jobs(registry_file) == jobs_before, "a refused submit wrote a job"
    # The same submit within range is answered by the library.
    assert farm.submit("mlp-tiny", "llvm", 2, registry=f"sqlite:///{registry_file}").cache_hit


def test_trials_0_is_refused_before_a_registry_is_made(tmp_path):
    """It tuned nothing and stored the untuned build as the model's library ("0 of 0 trials")."""
    registry = tmp_path / "registry.db"
    with pytest.raises(BadInput, match="trials must be 1 to 1,000,000, got 0"):
        farm.submit("mlp-tiny", "llvm", 1, trials=0, registry=f"sqlite:///{registry}")
    assert not registry.exists()


def _deep(levels: int) -> dict:
    deep: object = 1
    for _ in range(levels):
        deep = [deep]
    return {"kind": "llvm", "mattr": deep}


@pytest.mark.parametrize("target", [_deep(2000), _deep(sys.getrecursionlimit() * 2)])
def test_a_target_dict_nested_too_deeply_is_bad_input(tmp_path, target):
    """json.dumps raised RecursionError: not a FarmError."""
    registry = tmp_path / "registry.db"
    for call in (farm.submit, farm.load):
        with pytest.raises(FarmError) as refused:
            call("mlp-tiny", target, 1, registry=f"sqlite:///{registry}")
        assert refused.value.exit_code == 2 and "nested too deeply" in str(refused.value)
    assert not registry.exists()


@pytest.mark.parametrize("variable", ["FARM_KEEP_SLOWER_TUNED", "FARM_CPU_CACHE_FLUSH", "FARM_FORK_WORKERS"])
def test_a_switch_that_is_neither_yes_nor_no_stops_farm_submit_at_once(monkeypatch, tmp_path, variable):
    """`farm` refused it as a command started; farm.submit read FARM_KEEP_SLOWER_TUNED after tuning, failing the job."""
    monkeypatch.setenv(variable, "sometimes")
    registry = tmp_path / "registry.db"
    with pytest.raises(BadInput) as refused:
        farm.submit("mlp-tiny", "llvm", 1, registry=f"sqlite:///{registry}")
    assert str(refused.value).startswith(f"{variable}='sometimes' is neither yes nor no")
    assert not registry.exists()


@pytest.mark.parametrize(("given", "says"), [
    (dict(address=5), "address must be a string, got int 5"),
    (dict(address="coord:50051", token_file=5), "token_file must be a string, got int 5"),
    (dict(address="coord:50051", tls_ca=["ca.pem"]), "tls_ca must be a string"),
])
def test_a_coordinator_of_what_cannot_be_one_is_bad_input(given, says):
    """farm.Coordinator(5) was made, and its use raised TypeError (a token file of 5: from os.fspath)."""
    with pytest.raises(BadInput) as refused:
        farm.Coordinator(**given)
    assert str(refused.value).startswith(says) and refused.value.exit_code == 2


def test_a_coordinators_files_may_be_given_as_strings():
    coordinator = farm.Coordinator("coord:50051", token_file="token", tls_ca="ca.pem")
    assert coordinator.token_file.name == "token" and coordinator.tls_ca.name == "ca.pem"
