"""Wrong TLS files given to real `farm` processes: the coordinator and its callers refuse them in
one line that names the option and the file, exit 2, before gRPC sees them (gRPC's core logged
lines of its own, and a key that was not the certificate's read "the port is in use")."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess

import pytest

from support.certificates import EXPIRED, NOT_YET_VALID, CertificateAuthority

# gRPC core's own log lines: "E1203 10:39:49.747782   15426 ssl_transport_security.cc:1558] ..."
GRPC_CORE_LINE = re.compile(r"^[EIWF]\d{4} ", re.MULTILINE)


@pytest.fixture
def authority(tmp_path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "pki")


def farm_env(tmp_path) -> dict[str, str]:
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home")}
    for name in ("FARM_REGISTRY", "FARM_TOKEN", "FARM_TOKEN_FILE", "FARM_TLS_CA", "FARM_TLS_CERT", "FARM_TLS_KEY",
                 "FARM_TLS_CLIENT_CA", "FARM_COORDINATOR_TLS_CLIENT_CA"):
        env.pop(name, None)
    return env


def refused(farm_exe, tmp_path, *args: str) -> str:
    """The one line a `farm` command that must refuse its files at once writes; exit 2."""
    proc = subprocess.run([farm_exe, *args], env=farm_env(tmp_path), capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert not GRPC_CORE_LINE.search(proc.stderr), proc.stderr
    return lines[0]


def coordinator(*tls: str) -> list[str]:
    return ["coordinator", "--listen", "127.0.0.1:0", "--tracker-listen", "127.0.0.1:0", *tls]


def test_the_coordinator_refuses_files_that_are_not_what_their_option_takes(farm_exe, tmp_path, authority):
    issued, other = authority.issue("coordinator", server=True), authority.issue("other", server=True)
    cert, key = str(issued.cert), str(issued.key)
    cases = [
        (["--tls-cert", key, "--tls-key", cert], f"--tls-cert {key} is a private key and --tls-key {cert} a "
                                                 "certificate", "swap them"),
        (["--tls-cert", key, "--tls-key", key], f"--tls-cert {key} is a private key, not a certificate",
         "--tls-key"),
        (["--tls-cert", cert, "--tls-key", cert], f"--tls-key {cert} is a certificate, not a private key",
         "--tls-cert"),
        (["--tls-cert", cert, "--tls-key", str(other.key)],
         f"the key --tls-key {other.key} does not match the certificate --tls-cert {cert}", "the key"),
        (["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", key],
         f"--tls-client-ca {key} is a private key, not a CA certificate", "CA that signs callers'"),
    ]
    for args, problem, fix in cases:
        line = refused(farm_exe, tmp_path, *coordinator(*args))
        assert line.startswith(f"error: {problem} ("), line
        assert fix in line.split(" (", 1)[1], line
    assert not (tmp_path / "home" / "registry.db").exists(), "refused before touching the registry"


@pytest.mark.parametrize(("valid", "said"), [(EXPIRED, "expired on"), (NOT_YET_VALID, "is not valid until")])
def test_the_coordinator_refuses_a_certificate_out_of_its_dates(farm_exe, tmp_path, authority, valid, said):
    issued = authority.issue("coordinator", server=True, valid=valid)
    line = refused(farm_exe, tmp_path, *coordinator("--tls-cert", str(issued.cert), "--tls-key", str(issued.key)))
    assert f"error: the certificate --tls-cert {issued.cert} {said} " in line
    assert "renew it" in line and "clock" in line


def test_the_coordinator_warns_of_a_certificate_that_ends_soon(farm_exe, tmp_path, authority):
    issued = authority.issue("coordinator", server=True, valid=(-dt.timedelta(days=30), dt.timedelta(days=2)))
    proc = subprocess.Popen([farm_exe, *coordinator("--tls-cert", str(issued.cert), "--tls-key", str(issued.key))],
                            env=farm_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "Ctrl-C or SIGTERM stops it" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        lines.extend(proc.communicate(timeout=120)[1].splitlines())
    assert proc.returncode == 0, "".join(lines)
    [warning] = [line for line in lines if "expires on" in line]
    assert "WARNING" in warning and f"the certificate --tls-cert {issued.cert} expires on " in warning
    assert "renew it" in warning


def test_callers_refuse_files_that_are_not_what_their_option_takes(farm_exe, tmp_path, authority):
    client, other = authority.issue("client", server=False), authority.issue("other", server=False)
    old = authority.issue("old", server=False, valid=EXPIRED)
    jobs = ["jobs", "--coordinator", "127.0.0.1:1"]  # refused before any call: nothing need listen there
    cases = [
        (["--tls-ca", str(client.key)], f"--tls-ca {client.key} is a private key, not a CA certificate"),
        (["--tls-ca", str(authority.cert), "--tls-cert", str(client.cert), "--tls-key", str(other.key)],
         f"the key --tls-key {other.key} does not match the certificate --tls-cert {client.cert}"),
        (["--tls-ca", str(authority.cert), "--tls-cert", str(old.cert), "--tls-key", str(old.key)],
         f"the certificate --tls-cert {old.cert} expired on "),
    ]
    for args, problem in cases:
        assert refused(farm_exe, tmp_path, *jobs, *args).startswith(f"error: {problem}")


@pytest.mark.parametrize(("valid", "said"), [(EXPIRED, "expired on"), (NOT_YET_VALID, "is not valid until")])
def test_a_ca_out_of_its_dates_is_refused_by_callers_and_the_coordinator(farm_exe, tmp_path, valid, said):
    """OpenSSL refuses every certificate such a CA signed, in gRPC's words "certificate verify
    failed": callers read that as the coordinator's certificate, a mutual-TLS coordinator refused
    every caller."""
    stale = CertificateAuthority(tmp_path / "stale", name="stale CA", valid=valid)
    line = refused(farm_exe, tmp_path, "jobs", "--coordinator", "127.0.0.1:1", "--tls-ca", str(stale.cert))
    assert line.startswith(f"error: the CA certificate --tls-ca {stale.cert} {said} "), line
    assert "a current one" in line and "clock" in line
    issued = CertificateAuthority(tmp_path / "pki").issue("coordinator", server=True)
    line = refused(farm_exe, tmp_path, *coordinator("--tls-cert", str(issued.cert), "--tls-key", str(issued.key),
                                                    "--tls-client-ca", str(stale.cert)))
    assert line.startswith(f"error: the CA certificate --tls-client-ca {stale.cert} {said} "), line
