"""One submission for every caller: `farm submit`, farm.submit, a client's request and the coordinator read the same
Submission (foundation.domain.submission), and a bad `--until` is refused in the same line by each."""

from __future__ import annotations

import json
from dataclasses import replace

import grpc
import pytest

import farm
from coordinator.server import serve
from farm.submit_values import SubmitRequest
from foundation.domain.job_spec import DEFAULT_VALIDATION_RUNS, DISTRIBUTED, EMBEDDED, job_options
from foundation.domain.reuse import ReuseMode
from foundation.domain.submission import OnnxUpload, Submission, until_request
from foundation.errors import BadInput
from foundation.registry.store import RegistryStore
from foundation.wire import farm_pb2, farm_pb2_grpc
from foundation.wire.submission import submission_of, submit_request

from support.farm_inprocess import run_farm_inprocess

SUBMISSIONS = [
    Submission("mlp-tiny", "llvm"),
    Submission("resnet-18", '{"kind": "llvm", "num-cores": 2}', 4, trials=64, trials_per_task=8, retune=True,
               reuse="topup", seed=7, warm_start=False, validation_runs=5, weights_layout="prepacked",
               until=until_request("20ms", 3, 16), fingerprint="cpu-0123456789ab"),
    Submission("model.onnx", "cuda", 2, reuse=ReuseMode.OFF, until=until_request("onnxruntime"),
               onnx=OnnxUpload("model.onnx", b"\x08\x07onnx bytes", "ab" * 32)),
]


@pytest.mark.parametrize("submission", SUBMISSIONS, ids=["defaults", "every-option", "uploaded"])
def test_a_submission_crosses_the_wire_unchanged(submission):
    sent = farm_pb2.SubmitRequest.FromString(submit_request(submission).SerializeToString())
    assert submission_of(sent) == submission


def test_the_wire_unset_values_are_the_submission_defaults():
    received = submission_of(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", target="llvm", batch=1))
    assert received == Submission("mlp-tiny", "llvm", 1)
    assert received.validation_runs == DEFAULT_VALIDATION_RUNS and received.reuse_mode is ReuseMode.AUTO
    assert submission_of(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", target="llvm", batch=1, retune=True,
                                                until=farm_pb2.Until(goal="2ms"))).until == until_request("2ms")
    assert Submission("mlp-tiny", "llvm", retune=True).reuse_mode is ReuseMode.OFF


def test_an_embedded_request_is_the_submission_it_was_made_from():
    asked = SUBMISSIONS[1]
    request = SubmitRequest.of(asked, registry="sqlite:///r.db")
    assert Submission(**{f: getattr(request, f) for f in Submission.__dataclass_fields__}) == asked
    assert request.job_spec() == replace(asked.job_spec(DISTRIBUTED), mode=EMBEDDED)


def test_a_reuse_mode_or_spec_that_cannot_be_is_bad_input():
    with pytest.raises(BadInput, match="unknown reuse mode 'sometimes'"):
        Submission("mlp-tiny", "llvm", reuse="sometimes")
    with pytest.raises(BadInput, match="validation_runs 0"):
        Submission("mlp-tiny", "llvm", validation_runs=0).job_spec(EMBEDDED)
    with pytest.raises(BadInput, match="trials -1"):
        Submission("mlp-tiny", "llvm", trials=-1).job_spec(DISTRIBUTED)


@pytest.fixture
def coordinator(tmp_path):
    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator")
    yield server
    server.stop(grace=1)


# (farm submit's arguments, farm.submit's, the submission both stand for)
ASKED = [
    (["mlp-tiny", "llvm", "2", "--trials", "64", "--trials-per-task", "8", "--retune", "--reuse", "topup", "--seed",
      "7", "--cold", "--runs", "5", "--weights-layout", "prepacked"],
     dict(model="mlp-tiny", target="llvm", batch=2, trials=64, trials_per_task=8, retune=True, reuse="topup", seed=7,
          warm_start=False, runs=5, weights_layout="prepacked"),
     Submission("mlp-tiny", "llvm", 2, trials=64, trials_per_task=8, retune=True, reuse=ReuseMode.TOPUP, seed=7,
                warm_start=False, validation_runs=5, weights_layout="prepacked")),
    (["mlp-tiny", "llvm", "1", "--until", "20ms", "--patience", "3", "--round-trials", "16", "--weights-layout",
      "plain"],
     dict(model="mlp-tiny", target="llvm", batch=1, until="20ms", patience=3, round_trials=16, weights_layout="plain"),
     Submission("mlp-tiny", "llvm", 1, until=until_request("20ms", 3, 16), weights_layout="plain")),
]


@pytest.mark.parametrize(("args", "kwargs", "expected"), ASKED, ids=["options", "until"])
def test_the_cli_and_the_api_ask_a_coordinator_the_same(coordinator, tmp_path, args, kwargs, expected):
    """Each job a coordinator stores holds the spec of the submission asked for, whoever asked."""
    store = RegistryStore(coordinator.coordinator.store.url)
    proc = run_farm_inprocess("submit", *args, "--coordinator", coordinator.address, "--no-wait", "--json",
                              home=tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    by_cli = json.loads(proc.stdout)["job"]
    farm.cancel(by_cli, coordinator=coordinator.address)  # an unfinished equal job would be joined, not made anew
    by_api = farm.submit(**kwargs, coordinator=coordinator.address, wait=False).id
    farm.cancel(by_api, coordinator=coordinator.address)
    assert by_api != by_cli
    for job_id in (by_cli, by_api):
        job = store.get_job(job_id)
        assert job_options(job).spec == expected.job_spec(DISTRIBUTED)
        assert (store.get_model(job.model_id).name, store.get_model(job.model_id).batch, job.target_request) == \
            (expected.model, expected.batch, expected.target)


@pytest.mark.parametrize("goal", ["fast", "20", "0ms"])
def test_a_bad_until_is_the_same_line_from_the_cli_the_api_and_the_coordinator(coordinator, tmp_path, goal):
    proc = run_farm_inprocess("submit", "mlp-tiny", "llvm", "1", "--until", goal, home=tmp_path / "home")
    assert proc.returncode == 2
    with pytest.raises(BadInput) as by_api:
        farm.submit("mlp-tiny", "llvm", 1, until=goal)
    with grpc.insecure_channel(coordinator.address) as channel, pytest.raises(grpc.RpcError) as by_coordinator:
        farm_pb2_grpc.FarmClientStub(channel).Submit(
            farm_pb2.SubmitRequest(zoo_name="mlp-tiny", target="llvm", batch=1, until=farm_pb2.Until(goal=goal)),
            timeout=30)
    assert by_coordinator.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert proc.stderr.strip() == f"error: {by_api.value}" == f"error: {by_coordinator.value.details()}"
    assert f"--until {goal!r}" in proc.stderr
