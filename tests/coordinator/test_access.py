"""The coordinator's door over real gRPC on loopback: the token on every call but the health
service's, TLS with a certificate made here, mutual TLS, the plaintext health port, and no
start beyond loopback without a token."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.server import serve
from farm.client import CoordinatorClient
from foundation.errors import FarmError
from foundation.wire import farm_pb2, farm_pb2_grpc
from foundation.wire.access import ChannelAccess, ServerAccess, open_channel

from support.certificates import CertificateAuthority

TOKEN = "s3cret-token-of-the-farm"


@pytest.fixture
def start(tmp_path):
    """Coordinators on loopback (SQLite), stopped at teardown."""
    servers = []

    def started(access: ServerAccess, **overrides):
        options = dict(listen="127.0.0.1:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                       tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator", access=access)
        servers.append(serve(**(options | overrides)))
        return servers[-1]

    yield started
    for server in servers:
        server.stop(grace=1)


@pytest.fixture
def authority(tmp_path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


def register(channel, hostname: str = "rogue"):
    from foundation.hardware.fingerprint import local_fingerprint
    from foundation.hardware.versions import tvm_version

    fp = local_fingerprint("llvm")  # a whole one: the coordinator refuses less (test_hostile_requests)
    request = farm_pb2.RegisterRequest(fingerprint_id=fp.id, fingerprint_summary=fp.summary,
                                       fingerprint_json=json.dumps(fp.to_json()), target_kinds=["llvm"],
                                       hostname=hostname, tvm_version=tvm_version())
    return farm_pb2_grpc.FarmAgentStub(channel).Register(request, timeout=10)


def health_status(channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def test_every_call_needs_the_token(start):
    server = start(ServerAccess(token=TOKEN))
    with grpc.insecure_channel(server.address) as bare:
        # A raw Register, the rogue agent of issue 18, is refused and leaves no agent behind.
        with pytest.raises(grpc.RpcError) as refused:
            register(bare)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "requires the farm's token" in refused.value.details() and "FARM_TOKEN" in refused.value.details()
        # A stream is refused the same way.
        with pytest.raises(grpc.RpcError) as watch:
            list(farm_pb2_grpc.FarmClientStub(bare).WatchJob(farm_pb2.WatchJobRequest(job_id="job-x"), timeout=10))
        assert watch.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # The health service stays open.
        assert health_status(bare) == health_pb2.HealthCheckResponse.SERVING

    with pytest.raises(FarmError) as missing:
        CoordinatorClient(server.address).list_agents(include_lost=True)
    assert f"the coordinator at {server.address} refused the call" in str(missing.value)
    assert "FARM_TOKEN" in str(missing.value)
    with pytest.raises(FarmError) as wrong:
        CoordinatorClient(server.address, access=ChannelAccess(token="guess")).list_agents(include_lost=True)
    assert "is not this coordinator's" in str(wrong.value)

    client = CoordinatorClient(server.address, access=ChannelAccess(token=TOKEN))
    assert client.list_agents(include_lost=True) == []
    with open_channel(server.address, ChannelAccess(token=TOKEN)) as channel:
        assert register(channel, "legit").agent_id
        with pytest.raises(grpc.RpcError) as unknown:  # past the door, the servicer answers
            list(farm_pb2_grpc.FarmClientStub(channel).WatchJob(farm_pb2.WatchJobRequest(job_id="job-x"),
                                                                timeout=10))
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert [a.hostname for a in client.list_agents(include_lost=True)] == ["legit"]


def test_no_token_on_loopback_is_open(start):
    server = start(ServerAccess())
    assert CoordinatorClient(server.address).list_agents() == []
    # A caller with a token is welcome too.
    assert CoordinatorClient(server.address, access=ChannelAccess(token=TOKEN)).list_agents() == []


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", "example.org:0"])
def test_no_start_beyond_loopback_without_a_token(start, listen):
    with pytest.raises(FarmError) as refused:
        start(ServerAccess(), listen=listen)
    assert "beyond loopback, without a token" in refused.value.problem
    assert "FARM_TOKEN" in refused.value.fix and "--token-file" in refused.value.fix


def test_tls_with_a_certificate_made_here(start, authority):
    issued = authority.issue("coordinator", server=True)
    access = ServerAccess.from_files(tls_cert=issued.cert, tls_key=issued.key, environ={"FARM_TOKEN": TOKEN})
    server = start(access, listen="localhost:0", health_listen="127.0.0.1:0")
    address = f"localhost:{server.port}"
    trusted = ChannelAccess.from_files(tls_ca=authority.cert, environ={"FARM_TOKEN": TOKEN})
    assert trusted.tls and trusted.token == TOKEN
    assert CoordinatorClient(address, access=trusted).list_agents() == []

    # Plaintext to a TLS port fails, and says what to set.
    with pytest.raises(FarmError) as plaintext:
        CoordinatorClient(address, timeout=10, access=ChannelAccess(token=TOKEN)).list_agents()
    assert "FARM_TLS_CA" in str(plaintext.value)
    # A CA that did not sign the coordinator's certificate is not trusted.
    stranger = CertificateAuthority(authority.directory / "other", name="another CA")
    distrustful = ChannelAccess.from_files(tls_ca=stranger.cert, environ={"FARM_TOKEN": TOKEN})
    with pytest.raises(FarmError) as untrusted:
        CoordinatorClient(address, timeout=10, access=distrustful).list_agents()
    assert "no TLS connection" in str(untrusted.value)
    # TLS does not replace the token.
    with pytest.raises(FarmError, match="refused the call"):
        CoordinatorClient(address, access=ChannelAccess.from_files(tls_ca=authority.cert, environ={})).list_agents()

    # The health service, alone and in plaintext, on its own port for probes that cannot do TLS.
    with grpc.insecure_channel(f"127.0.0.1:{server.health_port}") as probe:
        assert health_status(probe) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as not_there:
            register(probe)
        assert not_there.value.code() == grpc.StatusCode.UNIMPLEMENTED
        server.stop(grace=1)
        with pytest.raises(grpc.RpcError):
            health_status(probe)


def test_mutual_tls(start, authority):
    issued = authority.issue("coordinator", server=True)
    server = start(ServerAccess.from_files(tls_cert=issued.cert, tls_key=issued.key, tls_client_ca=authority.cert,
                                           environ={"FARM_TOKEN": TOKEN}), listen="localhost:0")
    address = f"localhost:{server.port}"
    client = authority.issue("client", server=False)
    with_cert = ChannelAccess.from_files(tls_ca=authority.cert, tls_cert=client.cert, tls_key=client.key,
                                         environ={"FARM_TOKEN": TOKEN})
    assert CoordinatorClient(address, access=with_cert).list_agents() == []
    without_cert = ChannelAccess.from_files(tls_ca=authority.cert, environ={"FARM_TOKEN": TOKEN})
    with pytest.raises(FarmError):
        CoordinatorClient(address, timeout=10, access=without_cert).list_agents()
    # A certificate from another CA is refused.
    other = CertificateAuthority(authority.directory / "other", name="another CA").issue("intruder", server=False)
    foreign = ChannelAccess.from_files(tls_ca=authority.cert, tls_cert=other.cert, tls_key=other.key,
                                       environ={"FARM_TOKEN": TOKEN})
    with pytest.raises(FarmError):
        CoordinatorClient(address, timeout=10, access=foreign).list_agents()
