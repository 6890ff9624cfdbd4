"""The coordinator's gRPC calls on its /metrics, over real gRPC on loopback: each call counted once by
method and the status code its caller saw, refused ones too, and timed; methods it does not serve
under `unknown`; and `farm_build_info`."""

from __future__ import annotations

import platform

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from foundation.hardware.versions import tvm_version
from foundation.wire import farm_pb2, farm_pb2_grpc
from foundation.wire.access import ChannelAccess, ServerAccess, open_channel

from support.polling import wait_for
from support.prometheus_scrape import Scrape

TOKEN = "metrics-of-the-calls-token"
CLIENT, AGENT = "tvmfarm.v1.FarmClient", "tvmfarm.v1.FarmAgent"


def code_of(call) -> grpc.StatusCode:
    """The status code a call ended with, as its caller sees it."""
    try:
        call()
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def proto_type(service: str, method: str) -> str:
    """A method's call type as its .proto declares it: which sides stream."""
    descriptors = [*farm_pb2.DESCRIPTOR.services_by_name.values(), *health_pb2.DESCRIPTOR.services_by_name.values()]
    found = next(candidate for descriptor in descriptors if descriptor.full_name == service
                 for candidate in descriptor.methods if candidate.name == method)
    return {(False, False): "unary", (False, True): "server_stream", (True, False): "client_stream",
            (True, True): "bidi_stream"}[(found.client_streaming, found.server_streaming)]


def handled(scrape: Scrape, service: str, method: str, code: grpc.StatusCode) -> float:
    return scrape.value("grpc_server_handled_total", grpc_service=service, grpc_method=method, grpc_code=code.name)


def settled(port: int, since: Scrape, calls: list) -> Scrape:
    """The first scrape in which each of ``calls`` (service, method, code) has been counted since ``since``."""
    def counted() -> Scrape | None:
        scrape = Scrape(port)
        return scrape if all(handled(scrape, *call) > handled(since, *call) for call in calls) else None

    return wait_for(counted, 30, "the calls to be counted")


@pytest.mark.parametrize("registry_url", ["sqlite"], indirect=True)
def test_each_call_is_counted_by_method_and_code_and_timed(start):
    server, _ = start(access=ServerAccess(token=TOKEN), metrics_listen="127.0.0.1:0")
    port = server.metrics.port
    nope, watch = farm_pb2.GetJobRequest(job_id="job-nope"), farm_pb2.WatchJobRequest(job_id="job-nope")
    with grpc.insecure_channel(server.address) as bare, open_channel(server.address, ChannelAccess(token=TOKEN)) as ok:
        client, agent = farm_pb2_grpc.FarmClientStub(ok), farm_pb2_grpc.FarmAgentStub(ok)
        calls = {  # (service, method): a call, each kind of handler once: plain, coroutine, stream
            (CLIENT, "ListAgents"): lambda: client.ListAgents(farm_pb2.ListAgentsRequest(), timeout=10),
            (CLIENT, "GetJob"): lambda: client.GetJob(nope, timeout=10),
            (AGENT, "Heartbeat"): lambda: agent.Heartbeat(farm_pb2.HeartbeatRequest(agent_id=""), timeout=10),
            (CLIENT, "WatchJob"): lambda: list(client.WatchJob(watch, timeout=10)),
            ("grpc.health.v1.Health", "Check"):
                lambda: health_pb2_grpc.HealthStub(bare).Check(health_pb2.HealthCheckRequest(), timeout=10),
        }
        before = Scrape(port)
        codes = {name: code_of(call) for name, call in calls.items()}
        # A call is counted as its handler ends, which may be just after its caller has the answer.
        middle = settled(port, before, [(service, method, code) for (service, method), code in codes.items()])
        refused = code_of(lambda: farm_pb2_grpc.FarmClientStub(bare).GetJob(nope, timeout=10))
        unserved = code_of(lambda: ok.unary_unary("/tvmfarm.v1.FarmClient/Nope")(b"", timeout=10))
        # A method name the caller made up, refused at the door: still no label of its choosing.
        made_up = code_of(lambda: bare.unary_unary("/evil.Service/" + "x" * 200)(b"", timeout=10))
        after = settled(port, middle, [(CLIENT, "GetJob", refused), ("unknown", "unknown", refused),
                                       ("unknown", "unknown", unserved)])

    assert codes[(CLIENT, "ListAgents")] == codes[("grpc.health.v1.Health", "Check")] == grpc.StatusCode.OK
    assert codes[(CLIENT, "GetJob")] == codes[(CLIENT, "WatchJob")] == grpc.StatusCode.NOT_FOUND
    assert codes[(AGENT, "Heartbeat")] == grpc.StatusCode.INVALID_ARGUMENT  # no agent id
    for (service, method), code in codes.items():
        assert handled(middle, service, method, code) - handled(before, service, method, code) == 1, (method, code)
        timed = {"grpc_service": service, "grpc_method": method}
        assert middle.value("grpc_server_handling_seconds_count", **timed) - \
            before.value("grpc_server_handling_seconds_count", **timed) == 1, method
        assert middle.value("grpc_server_handling_seconds_bucket", le="+Inf", **timed) == \
            middle.value("grpc_server_handling_seconds_count", **timed)
    # Other tests in this process may have called other methods (a pack's streams among them):
    # every method counted carries the type its .proto gives it.
    assert after.labels("grpc_server_handled_total") and all(
        labels["grpc_type"] == proto_type(labels["grpc_service"], labels["grpc_method"])
        for labels in after.labels("grpc_server_handled_total") if labels["grpc_method"] != "unknown")
    assert proto_type(CLIENT, "WatchJob") == "server_stream" and proto_type(CLIENT, "GetJob") == "unary"

    assert refused == made_up == grpc.StatusCode.UNAUTHENTICATED and unserved == grpc.StatusCode.UNIMPLEMENTED
    assert handled(after, CLIENT, "GetJob", refused) - handled(middle, CLIENT, "GetJob", refused) == 1
    assert handled(after, "unknown", "unknown", refused) - handled(middle, "unknown", "unknown", refused) == 1
    assert handled(after, "unknown", "unknown", unserved) - handled(middle, "unknown", "unknown", unserved) == 1
    assert not [labels for labels in after.labels("grpc_server_handled_total")
                if labels["grpc_method"] in ("Nope", "x" * 200)]

    assert after.labels("farm_build_info") == [{"version": "0.1.0", "tvm_version": tvm_version(),
                                                "python_version": platform.python_version()}]
    assert after.value("farm_build_info") == 1
