"""The coordinator's client (farm.client) against a real coordinator on loopback."""

from __future__ import annotations

import time

import pytest

from coordinator.server import serve
from farm.client import CoordinatorClient
from foundation.domain.submission import Submission
from foundation.wire import farm_pb2


@pytest.fixture
def client(tmp_path):
    server = serve(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator")
    client = CoordinatorClient(server.address)
    yield client
    client.close()
    server.stop(grace=1)


@pytest.mark.parametrize("timeout", [1e10, float("inf")])
def test_a_watch_with_a_far_deadline_follows_the_job_to_its_end(client, timeout):
    """gRPC's deadline overflowed: the watch ended at once, and `--timeout 1e10` said it had waited."""
    (submitted,) = client.submit(Submission("mlp-tiny", "llvm", 1))  # no agents: it waits, queued
    client.cancel(submitted.job.id, "ended by the test")
    events = list(client.watch(submitted.job.id, time.monotonic() + timeout))
    assert events and events[0].snapshot.state == farm_pb2.JOB_STATE_CANCELLED, events
