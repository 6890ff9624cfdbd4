"""The generated stubs work over real loopback gRPC, beside the standard health service."""

from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from foundation.domain.jobs import JobState
from foundation.domain.shards import ShardState
from foundation.wire import FARM_AGENT_SERVICE, FARM_CLIENT_SERVICE, farm_pb2, farm_pb2_grpc

TIMEOUT = 5.0


class OneAgentServicer(farm_pb2_grpc.FarmAgentServicer):
    """Knows one agent, registered by fingerprint; enough to exercise the stubs."""

    def __init__(self):
        self.agents: dict[str, str] = {}
        self.metadata: list[dict[str, str]] = []

    def Register(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        if not request.fingerprint_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "fingerprint_id is empty: run foundation/hardware/fingerprint.py")
        agent_id = f"agent-{len(self.agents) + 1}"
        self.agents[agent_id] = request.fingerprint_id
        response = farm_pb2.RegisterResponse(agent_id=agent_id)
        response.heartbeat_interval.FromSeconds(5)
        response.lease_ttl.FromSeconds(30)
        response.tracker.host, response.tracker.port, response.tracker.key = "127.0.0.1", 9190, request.fingerprint_id
        return response

    def Heartbeat(self, request, context):
        if request.agent_id in self.agents:
            return farm_pb2.HeartbeatResponse()
        reregister = farm_pb2.AgentInstruction(
            re_register=farm_pb2.ReRegister(reason=f"agent {request.agent_id} is unknown"))
        return farm_pb2.HeartbeatResponse(instructions=[reregister])

    def LeaseShard(self, request, context):
        if request.agent_id not in self.agents:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"agent {request.agent_id} is not registered: call Register again")
        return farm_pb2.LeaseShardResponse()


class OneJobServicer(farm_pb2_grpc.FarmClientServicer):
    def WatchJob(self, request, context):
        job = farm_pb2.Job(id=request.job_id, state=farm_pb2.JOB_STATE_RUNNING)
        yield farm_pb2.JobEvent(job_id=request.job_id, sequence=1, snapshot=job)
        yield farm_pb2.JobEvent(job_id=request.job_id, sequence=2, state_changed=farm_pb2.JobStateChanged(
            from_state=farm_pb2.JOB_STATE_RUNNING, to_state=farm_pb2.JOB_STATE_SUCCEEDED))


@pytest.fixture
def loopback():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agents = OneAgentServicer()
    farm_pb2_grpc.add_FarmAgentServicer_to_server(agents, server)
    farm_pb2_grpc.add_FarmClientServicer_to_server(OneJobServicer(), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", FARM_AGENT_SERVICE, FARM_CLIENT_SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    assert port > 0
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
        yield channel, agents
    finally:
        channel.close()
        server.stop(grace=None).wait(TIMEOUT)


def test_health_check_answers_for_the_farm_services(loopback):
    channel, _ = loopback
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", FARM_AGENT_SERVICE, FARM_CLIENT_SERVICE):
        reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=TIMEOUT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as err:
        stub.Check(health_pb2.HealthCheckRequest(service="tvmfarm.v1.Nope"), timeout=TIMEOUT)
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


def test_register_and_heartbeat_through_the_generated_stubs(loopback):
    channel, agents = loopback
    stub = farm_pb2_grpc.FarmAgentStub(channel)
    request = farm_pb2.RegisterRequest(fingerprint_id="llvm-x86-abc", target_kinds=["llvm"], tvm_version="0.27.0")
    reply = stub.Register(request, timeout=TIMEOUT, metadata=[("authorization", "Bearer later")])
    assert reply.agent_id == "agent-1"
    assert reply.heartbeat_interval.ToSeconds() == 5 and reply.lease_ttl.ToSeconds() == 30
    assert (reply.tracker.port, reply.tracker.key) == (9190, "llvm-x86-abc")
    # Credentials ride in call metadata, not in messages.
    assert agents.metadata[0]["authorization"] == "Bearer later"

    assert not stub.Heartbeat(farm_pb2.HeartbeatRequest(agent_id="agent-1"), timeout=TIMEOUT).instructions
    (instruction,) = stub.Heartbeat(farm_pb2.HeartbeatRequest(agent_id="agent-9"), timeout=TIMEOUT).instructions
    assert instruction.WhichOneof("instruction") == "re_register"
    assert not stub.LeaseShard(farm_pb2.LeaseShardRequest(agent_id="agent-1"), timeout=TIMEOUT).HasField("shard")


def test_status_codes_and_messages_reach_the_client(loopback):
    channel, _ = loopback
    stub = farm_pb2_grpc.FarmAgentStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.LeaseShard(farm_pb2.LeaseShardRequest(agent_id="agent-9"), timeout=TIMEOUT)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "call Register again" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.CompleteShard(farm_pb2.CompleteShardRequest(), timeout=TIMEOUT)
    assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_watch_job_streams_events(loopback):
    channel, _ = loopback
    events = list(farm_pb2_grpc.FarmClientStub(channel).WatchJob(
        farm_pb2.WatchJobRequest(job_id="j1"), timeout=TIMEOUT))
    assert [e.WhichOneof("event") for e in events] == ["snapshot", "state_changed"]
    assert events[1].state_changed.to_state == farm_pb2.JOB_STATE_SUCCEEDED


def test_wire_enums_mirror_the_state_machines():
    # The proto enums and the pure modules' enums must name the same states.
    assert {f"JOB_STATE_{s.name}" for s in JobState} | {"JOB_STATE_UNSPECIFIED"} == set(farm_pb2.JobState.keys())
    shard_states = {f"SHARD_STATE_{s.name}" for s in ShardState} | {"SHARD_STATE_UNSPECIFIED"}
    assert shard_states == set(farm_pb2.ShardState.keys())
