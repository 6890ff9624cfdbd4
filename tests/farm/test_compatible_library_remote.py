"""A coordinator answers a submit for a fingerprint with no library of its own by the library of a
compatible one (the same CPU at another core count), as the embedded farm does."""

from __future__ import annotations

import json

import grpc
import pytest

from coordinator.server import serve
from foundation.hardware.fingerprint import fingerprint_from_details
from foundation.hardware.versions import tvm_version
from foundation.registry import RegistryStore
from foundation.wire import farm_pb2, farm_pb2_grpc

pytestmark = pytest.mark.slow


def test_a_compatible_agents_submit_is_answered_by_the_library(tuned_mlp_tiny, tmp_path):
    tuned = tuned_mlp_tiny.submitted
    home = tuned_mlp_tiny.copy_to(tmp_path / "home")
    registry = f"sqlite:///{home / 'registry.db'}"
    store = RegistryStore(registry)
    details = store.get_fingerprint(tuned["fingerprint"]).details
    store.dispose()
    other_size = fingerprint_from_details("cpu", {**details, "cores": details["cores"] + 6})
    assert other_size.id != tuned["fingerprint"]

    server = serve(listen="127.0.0.1:0", registry_url=registry, tracker="127.0.0.1:9190", heartbeat_interval=0.5,
                   lease_ttl=30.0, tick_interval=0.1, data_dir=tmp_path / "coordinator")
    try:
        channel = grpc.insecure_channel(server.address)
        farm_pb2_grpc.FarmAgentStub(channel).Register(farm_pb2.RegisterRequest(
            fingerprint_id=other_size.id, fingerprint_summary=other_size.summary,
            fingerprint_json=json.dumps(other_size.to_json()), target_kinds=["llvm"], hostname="eight-core-pod",
            tvm_version=tvm_version()), timeout=30)
        (submitted,) = farm_pb2_grpc.FarmClientStub(channel).Submit(farm_pb2.SubmitRequest(
            zoo_name="mlp-tiny", batch=2, target="llvm", fingerprint_id=other_size.id), timeout=60).jobs
        job = submitted.job
        assert job.cache_hit and job.state == farm_pb2.JOB_STATE_SUCCEEDED, job
        assert job.fingerprint_id == other_size.id and job.artifact.id == tuned["artifact"]["id"]
        channel.close()
    finally:
        server.stop(grace=1)
