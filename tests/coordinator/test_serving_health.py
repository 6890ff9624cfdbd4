"""The coordinator's /healthz on its metrics port, over real HTTP and gRPC on loopback: it says what
the gRPC health service says (serving; not while the registry fails; not once it drains), where
it answered 404, and before that the metrics page."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from foundation.wire import farm_pb2, farm_pb2_grpc

from support.polling import wait_for
from support.registry_db import cut_off, restore


def healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def grpc_health(channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_healthz_is_ok_while_serving_and_not_once_it_drains(start, tmp_path):
    server, channel = start(metrics_listen="127.0.0.1:0")
    port = server.metrics.port
    assert healthz(port) == (200, "serving\n")
    assert grpc_health(channel) == health_pb2.HealthCheckResponse.SERVING

    # A call in flight holds the drain for its grace, meanwhile /healthz says the coordinator stops.
    release = threading.Event()

    def chunks():
        yield farm_pb2.PackChunk(data=b"x")
        release.wait(60)

    in_flight = farm_pb2_grpc.FarmClientStub(channel).ImportPack.future(chunks(), timeout=90)
    stopping = threading.Thread(target=server.stop, kwargs={"grace": 60})
    try:
        # The coordinator spools the pack's first chunk (coordinator/calls/packs.py): it has the call.
        wait_for(lambda: next((tmp_path / "coordinator" / "packs").glob("*/import.farmpack"), None), 30,
                 "the coordinator to take the call")
        stopping.start()
        wait_for(lambda: server.coordinator.draining or None, 30, "the coordinator to drain")
        assert healthz(port) == (503, "the coordinator is stopping: it takes no new calls\n")
    finally:
        release.set()
        in_flight.cancel()
        if stopping.is_alive():
            stopping.join(90)


@pytest.mark.parametrize("registry_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_healthz_is_not_ok_while_the_registry_fails(start, store, registry_url, postgres_admin):
    """A PostgreSQL registry goes away while the coordinator runs (its server down), and comes back."""
    from sqlalchemy.engine import make_url

    server, channel = start(metrics_listen="127.0.0.1:0")
    port, database = server.metrics.port, make_url(registry_url).database
    assert healthz(port) == (200, "serving\n")
    cut_off(postgres_admin, database)
    try:
        wait_for(lambda: healthz(port)[0] == 503 or None, 30, "/healthz to say the registry fails")
        status, said = healthz(port)
        assert said.startswith("not serving: the coordinator's registry is failing: ") and database in said, said
        assert "\n" not in said.rstrip("\n")
        assert grpc_health(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        restore(postgres_admin, database)
    wait_for(lambda: healthz(port)[0] == 200 or None, 30, "/healthz to say it serves again")
    assert grpc_health(channel) == health_pb2.HealthCheckResponse.SERVING


def test_healthz_is_not_ok_before_the_api_serves():
    """The metrics port starts first (a taken one costs no tracker process), the API later."""
    from coordinator.registry_health import RegistryHealth
    from coordinator.serving_health import ServingHealth

    health = ServingHealth(RegistryHealth())
    assert health() == (False, "the coordinator is starting: its API does not serve yet")
    health.serves()
    assert health() == (True, "serving")
