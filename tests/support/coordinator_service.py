"""A coordinator over real gRPC on loopback for the service tests (tests/coordinator/test_service*.py):
started on each registry backend, stopped at teardown; submitting to it and waiting on its jobs."""

from __future__ import annotations

import time

import grpc
import pytest

from coordinator.server import serve
from foundation.wire import farm_pb2, farm_pb2_grpc

from support.polling import wait_for

TIMEOUT = 60.0  # per wait; the whole file stays well under two minutes


@pytest.fixture(scope="module")
def fingerprint():
    from foundation.hardware.fingerprint import local_fingerprint

    return local_fingerprint("llvm")


@pytest.fixture
def start(tmp_path, registry_url):
    """Start coordinators on loopback, on SQLite and on PostgreSQL; all stopped at teardown."""
    servers = []

    def started(**overrides):
        options = dict(
            listen="127.0.0.1:0", registry_url=registry_url,
            tracker="127.0.0.1:9190", heartbeat_interval=0.5, lease_ttl=30.0, tick_interval=0.1,
            data_dir=tmp_path / "coordinator",
        )
        server = serve(**(options | overrides))
        servers.append(server)
        channel = grpc.insecure_channel(server.address)
        return server, channel

    yield started
    for server in servers:
        server.stop(grace=1)


def submit_job(channel, model="mlp-tiny", **kw):
    stub = farm_pb2_grpc.FarmClientStub(channel)
    # Plain weights: the tests name the plain tasks (prepacked ones are renamed by TVM's layout pass).
    request = farm_pb2.SubmitRequest(zoo_name=model, batch=1, target="llvm", validation_runs=3, seed=7,
                                     **({"trials_per_task": 4, "weights_layout": "plain"} | kw))
    return stub.Submit(request, timeout=60).jobs


def wait_job(channel, job_id, *states, what=""):
    stub = farm_pb2_grpc.FarmClientStub(channel)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        job = stub.GetJob(farm_pb2.GetJobRequest(job_id=job_id), timeout=10)
        if job.state in states:
            return job
        if job.state in (farm_pb2.JOB_STATE_FAILED, farm_pb2.JOB_STATE_CANCELLED) and job.state not in states:
            pytest.fail(f"job {job_id} ended {farm_pb2.JobState.Name(job.state)}: {job.error}")
        time.sleep(0.1)
    pytest.fail(f"job {job_id} not {what or states} within {TIMEOUT} s: {job}")


def wait_until(condition, what):
    return wait_for(condition, TIMEOUT, what, interval=0.1)
