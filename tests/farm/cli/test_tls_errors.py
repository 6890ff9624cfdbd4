"""A TLS handshake that fails, through a real `farm` process against a real coordinator: one line on
stderr, the process's own (gRPC's core logs nothing beside it), with the reason in words."""

from __future__ import annotations

import os
import subprocess

import pytest

from coordinator.server import serve
from foundation.wire.access import ServerAccess

from support.certificates import CertificateAuthority

TOKEN = "s3cret-token-of-the-farm"


@pytest.fixture
def tls_coordinator(tmp_path):
    authority = CertificateAuthority(tmp_path / "pki")
    issued = authority.issue("coordinator", server=True)
    access = ServerAccess.from_files(tls_cert=issued.cert, tls_key=issued.key, environ={"FARM_TOKEN": TOKEN})
    server = serve(listen="localhost:0", registry_url=f"sqlite:///{tmp_path / 'registry.db'}",
                   tracker="127.0.0.1:9190", data_dir=tmp_path / "coordinator", access=access)
    yield server, authority
    server.stop(grace=1)


def test_a_failed_handshake_is_one_line(farm_exe, tls_coordinator, tmp_path):
    server, authority = tls_coordinator
    stranger = CertificateAuthority(tmp_path / "other", name="another CA")
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    for extra, reason in ((["--tls-ca", str(stranger.cert)], "certificate verify failed"),
                          ([], "cannot reach the coordinator")):
        proc = subprocess.run([farm_exe, "jobs", "--coordinator", f"localhost:{server.port}", *extra], env=env,
                              capture_output=True, text=True, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 4, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert reason in lines[0].lower() and "FARM_TLS_CA" in lines[0]
        assert ": OK (" not in lines[0] and "Handshake failed" not in proc.stderr


def test_an_agent_whose_handshake_fails_says_why_in_its_log(farm_exe, tls_coordinator, tmp_path):
    """It keeps trying (the coordinator may be restarting with a new certificate), each line
    with the reason in words: it logged gRPC's wrapped status, ending ': OK)'."""
    import signal
    import time

    server, authority = tls_coordinator
    stranger = CertificateAuthority(tmp_path / "other", name="another CA")
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_TOKEN": TOKEN}
    log = tmp_path / "agent.log"
    with log.open("w") as stderr:
        agent = subprocess.Popen([farm_exe, "agent", "--coordinator", f"localhost:{server.port}", "--tls-ca",
                                  str(stranger.cert)], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
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
        assert "(no TLS connection: certificate verify failed; " in line and "FARM_TLS_CA" in line, line
        assert ": OK" not in line and "TSI_PROTOCOL_FAILURE" not in line, line
    assert "Handshake failed" not in log.read_text()
