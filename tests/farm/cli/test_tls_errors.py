"""A TLS handshake that fails, through a real `farm` process against a real coordinator: one line on
stderr, the process's own (gRPC's core logs nothing beside it), with the reason in words."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from coordinator.server import serve
from foundation.wire.access import ServerAccess

from support.certificates import EXPIRED, NOT_YET_VALID, CertificateAuthority, Issued

TOKEN = "s3cret-token-of-the-farm"
# gRPC core's own log lines: "E1203 10:39:49.747782   15426 ssl_transport_security.cc:1558] ..."
GRPC_CORE_LINE = re.compile(r"^[EIWF]\d{4} ", re.MULTILINE)


@pytest.fixture
def tls_coordinator(tmp_path):
    authority = CertificateAuthority(tmp_path / "pki")
    issued = authority.issue("coordinator", server=True)
    access = ServerAccess.from_files(tls_cert=issued.cert, tls_key=issued.key, environ={"FARM_TOKEN": TOKEN})
    server = serve(listen="localhost:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator", access=access)
    yield server, authority
    server.stop(grace=1)


@pytest.fixture
def serve_tls(tmp_path):
    """Coordinators serving a given certificate as it is: one out of its dates is what a
    coordinator serves once its certificate expires while it runs (none starts with one)."""
    servers = []

    def started(issued: Issued, client_ca=None):
        access = ServerAccess(token=TOKEN, cert=issued.cert.read_bytes(), key=issued.key.read_bytes(),
                              client_ca=client_ca.read_bytes() if client_ca else None)
        servers.append(serve(listen="localhost:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                             tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator", access=access))
        return servers[-1]

    yield started
    for server in servers:
        server.stop(grace=1)


def jobs_error(farm_exe, tmp_path, address: str, *tls: str) -> str:
    """The one line `farm jobs` fails with against ``address``, exit 4 (unreachable)."""
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    proc = subprocess.run([farm_exe, "jobs", "--coordinator", address, *tls], env=env, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 4, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: no TLS connection to the coordinator at {address}: "), \
        proc.stderr
    assert not GRPC_CORE_LINE.search(proc.stderr), proc.stderr
    return lines[0]


@pytest.mark.parametrize(("valid", "said"), [(EXPIRED, "expired on"), (NOT_YET_VALID, "is not valid until")])
def test_a_certificate_out_of_its_dates_is_named(farm_exe, serve_tls, tmp_path, valid, said):
    authority = CertificateAuthority(tmp_path / "pki")
    server = serve_tls(authority.issue("coordinator", server=True, valid=valid))
    line = jobs_error(farm_exe, tmp_path, f"localhost:{server.port}", "--tls-ca", str(authority.cert))
    assert f"certificate verify failed: the coordinator's certificate {said} " in line
    assert "a current certificate" in line and "clocks" in line


def test_a_certificate_for_another_host_names_the_names_it_holds(farm_exe, serve_tls, tmp_path):
    authority = CertificateAuthority(tmp_path / "pki")
    server = serve_tls(authority.issue("coordinator", server=True, names=("farm.example.com", "10.1.2.3")))
    line = jobs_error(farm_exe, tmp_path, f"localhost:{server.port}", "--tls-ca", str(authority.cert))
    assert "the coordinator's certificate is for farm.example.com, 10.1.2.3, not localhost" in line
    assert "--coordinator" in line and "names localhost" in line
    # Dialled by address: OpenSSL's "IP address mismatch" was told with the fix of an unknown CA.
    line = jobs_error(farm_exe, tmp_path, f"127.0.0.1:{server.port}", "--tls-ca", str(authority.cert))
    assert "the coordinator's certificate is for farm.example.com, 10.1.2.3, not 127.0.0.1" in line
    assert "names 127.0.0.1" in line and "FARM_TLS_CA" not in line


def test_a_mutual_tls_coordinator_names_the_client_certificate_it_needs(farm_exe, serve_tls, tmp_path):
    authority = CertificateAuthority(tmp_path / "pki")
    server = serve_tls(authority.issue("coordinator", server=True), client_ca=authority.cert)
    address = f"localhost:{server.port}"
    line = jobs_error(farm_exe, tmp_path, address, "--tls-ca", str(authority.cert))
    assert "demands a client certificate (mutual TLS)" in line
    assert "--tls-cert" in line and "--tls-key" in line and "FARM_TLS_CERT" in line
    stranger = CertificateAuthority(tmp_path / "other", name="another CA").issue("intruder", server=False)
    line = jobs_error(farm_exe, tmp_path, address, "--tls-ca", str(authority.cert), "--tls-cert", str(stranger.cert),
                      "--tls-key", str(stranger.key))
    assert f"refused the client certificate --tls-cert {stranger.cert}" in line and "--tls-client-ca" in line


def test_a_failed_handshake_is_one_line(farm_exe, tls_coordinator, tmp_path):
    server, authority = tls_coordinator
    stranger = CertificateAuthority(tmp_path / "other", name="another CA")
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    # A plaintext call read "cannot reach the coordinator ... Socket closed", as if nothing listened.
    for extra, reason in ((["--tls-ca", str(stranger.cert)], "certificate verify failed"),
                          ([], "no tls connection to the coordinator at localhost:{port}: the coordinator serves "
                               "tls, and this call was plaintext")):
        reason = reason.format(port=server.port)
        proc = subprocess.run([farm_exe, "jobs", "--coordinator", f"localhost:{server.port}", *extra], env=env,
                              capture_output=True, text=True, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 4, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert reason in lines[0].lower() and "FARM_TLS_CA" in lines[0]
        assert ": OK (" not in lines[0] and "Handshake failed" not in proc.stderr


def test_a_tls_call_to_a_plaintext_coordinator_says_so(farm_exe, tmp_path):
    """OpenSSL's "wrong version number" was all it said."""
    server = serve(listen="localhost:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}", tracker="127.0.0.1:9190",
                   data_dir=tmp_path / "coordinator", access=ServerAccess(token=TOKEN))
    try:
        authority = CertificateAuthority(tmp_path / "pki")
        line = jobs_error(farm_exe, tmp_path, f"localhost:{server.port}", "--tls-ca", str(authority.cert))
    finally:
        server.stop(grace=1)
    assert ": the coordinator speaks plaintext, not TLS (call it without --tls-ca" in line, line


def agent_tries(farm_exe, tmp_path, address: str, *tls: str) -> list[str]:
    """The log lines of an agent's failed registrations at ``address``, two at least; it was
    stopped (SIGTERM) while it kept trying."""
    import signal
    import time

    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:
        agent = subprocess.Popen([farm_exe, "agent", "--coordinator", address, *tls], env=env,
                                 stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while log.read_text().count("register: coordinator unavailable") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
    tries = [line for line in log.read_text().splitlines() if "register: coordinator unavailable" in line]
    assert len(tries) >= 2, log.read_text()
    for line in tries:
        assert ": OK" not in line and "TSI_PROTOCOL_FAILURE" not in line and "Socket closed" not in line, line
    assert "Handshake failed" not in log.read_text() and not GRPC_CORE_LINE.search(log.read_text())
    return tries


def test_an_agent_whose_handshake_fails_says_why_in_its_log(farm_exe, tls_coordinator, tmp_path):
    """It keeps trying (the coordinator may be restarting with a new certificate), each line
    with the reason in words: it logged gRPC's wrapped status, ending ': OK)'."""
    server, authority = tls_coordinator
    stranger = CertificateAuthority(tmp_path / "other", name="another CA")
    for line in agent_tries(farm_exe, tmp_path, f"localhost:{server.port}", "--tls-ca", str(stranger.cert)):
        assert ("(no TLS connection: certificate verify failed: the coordinator's certificate is signed by "
                "'CN=tvm-farm test CA', which is not the CA in --tls-ca; ") in line and "FARM_TLS_CA" in line, line


def test_an_agent_without_the_client_certificate_names_it_in_its_log(farm_exe, serve_tls, tmp_path):
    """A mutual-TLS coordinator closes the connection on an agent without a client certificate,
    which gRPC reports as "Socket closed", as it does a coordinator that is away. The agent keeps
    trying, as through any outage (its certificate may be on its way), saying what it lacks."""
    authority = CertificateAuthority(tmp_path / "pki")
    server = serve_tls(authority.issue("coordinator", server=True), client_ca=authority.cert)
    for line in agent_tries(farm_exe, tmp_path, f"localhost:{server.port}", "--tls-ca", str(authority.cert)):
        assert "(no TLS connection: the coordinator demands a client certificate (mutual TLS)" in line, line
        assert "--tls-cert and --tls-key (FARM_TLS_CERT, FARM_TLS_KEY)" in line, line


def test_a_plaintext_agent_of_a_tls_coordinator_names_tls_in_its_log(farm_exe, tls_coordinator, tmp_path):
    """It logged gRPC's "Socket closed", as for a coordinator that is away."""
    server, _ = tls_coordinator
    for line in agent_tries(farm_exe, tmp_path, f"localhost:{server.port}"):
        assert "(no TLS connection: the coordinator serves TLS, and this call was plaintext; give --tls-ca " \
               "(FARM_TLS_CA)" in line, line
