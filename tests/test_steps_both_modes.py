"""Both modes run the same step functions (foundation.job_driver.steps): a step changed there changes both.

Each step is wrapped once, in its module, to note that it ran; then an embedded submit (real tuning of
mlp-tiny) and a coordinator's job (real planning and build, fake agents as in
tests/coordinator/test_service.py that report hand-made records and validate for real) each succeed
through the wrapped steps.
"""

from __future__ import annotations

import time

import grpc
import pytest

from coordinator.server import serve
from farm.embedded import submit
from farm.submit_values import SubmitRequest
from foundation.job_driver import steps
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.fake_agent import FakeAgent
from support.polling import wait_for

pytestmark = pytest.mark.slow

TIMEOUT = 60.0
# The steps both modes run, in order; the validation itself runs here in embedded mode and on an agent
# (with validation_settings) in the distributed one, its report read back by reported_check.
SHARED = ("plan", "seeds", "build", "validation_settings", "failed_validation", "commit")


@pytest.fixture
def ran(monkeypatch) -> list[str]:
    """The names of the steps run, in order, each wrapped where both modes look it up."""
    names: list[str] = []
    for name in (*SHARED, "validate", "reported_check"):
        real = getattr(steps, name)

        def noted(*args, _real=real, _name=name, **kwargs):
            names.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(steps, name, noted)
    return names


def test_an_embedded_job_runs_the_shared_steps(ran, tmp_path):
    request = SubmitRequest(model="mlp-tiny", target="llvm", batch=1, registry=f"sqlite:///{tmp_path / 'r.db'}",
                            trials=8, trials_per_task=4, validation_runs=2, weights_layout="plain", warm_start=False)
    result = submit(request)
    assert result.job.state == "succeeded", result.job
    assert [name for name in ran if name in SHARED] == list(SHARED)
    assert "validate" in ran and "reported_check" not in ran  # validated here


def test_a_coordinators_job_runs_the_shared_steps(ran, tmp_path):
    from foundation.hardware.fingerprint import local_fingerprint

    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", heartbeat_interval=0.5, lease_ttl=30.0, tick_interval=0.1,
                   data_dir=tmp_path / "coordinator")
    agent = None
    try:
        channel = grpc.insecure_channel(server.address)
        agent = FakeAgent(channel, local_fingerprint("llvm"))
        agent.register()
        agent.keep_beating()
        stub = farm_pb2_grpc.FarmClientStub(channel)
        (submitted,) = stub.Submit(farm_pb2.SubmitRequest(zoo_name="mlp-tiny", batch=1, target="llvm",
                                                          validation_runs=3, seed=7, trials_per_task=4,
                                                          weights_layout="plain"), timeout=60).jobs
        job_id = submitted.job.id
        shard = wait_for(agent.lease, TIMEOUT, "a shard", interval=0.1)
        assert agent.report(shard).accepted and agent.complete(shard).accepted
        wait_for(agent.validate, TIMEOUT, "a validation lease", interval=0.1)
        deadline = time.monotonic() + TIMEOUT
        while (job := stub.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=10)).state \
                != farm_pb2.JOB_STATE_SUCCEEDED:
            assert job.state not in (farm_pb2.JOB_STATE_FAILED, farm_pb2.JOB_STATE_CANCELLED), job.error
            assert time.monotonic() < deadline, f"job {job_id} did not succeed: {job}"
            time.sleep(0.1)
    finally:
        if agent is not None:
            agent.close()
        server.stop(grace=1)
    assert [name for name in ran if name in SHARED] == list(SHARED)
    assert "reported_check" in ran and "validate" not in ran  # validated by the agent
