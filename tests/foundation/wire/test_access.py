"""Where the token and TLS files come from, and what is refused before any call is made."""

from __future__ import annotations

import os
import threading

import pytest

from foundation.errors import FarmError
from foundation.wire.access import ChannelAccess, ServerAccess, is_loopback, read_token

from support.certificates import EXPIRED, CertificateAuthority


def test_token_from_file_or_environment(tmp_path):
    path = tmp_path / "token"
    path.write_text("  from-the-file\n")
    assert read_token(path, {"FARM_TOKEN": "from-env"}) == "from-the-file"  # the file wins
    assert read_token(None, {"FARM_TOKEN": "from-env"}) == "from-env"
    assert read_token(None, {}) is None
    assert read_token(None, {"FARM_TOKEN": ""}) is None


@pytest.mark.parametrize(("content", "needle"), [("\n", "is empty"), ("two words", "cannot have"),
                                                 ("caf\u00e9", "cannot have")])
def test_bad_tokens_are_refused(tmp_path, content, needle):
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(FarmError, match=needle):
        read_token(path, {})


def test_unreadable_token_file(tmp_path):
    with pytest.raises(FarmError, match="cannot read the token file") as err:
        read_token(tmp_path / "missing", {})
    assert "check the path" in err.value.fix


# Each option's file, read as every command that takes it reads it (ChannelAccess for callers,
# ServerAccess for the coordinator).
FILE_OPTIONS = {
    "--token-file": lambda path: read_token(path, {}),
    "--tls-ca": lambda path: ChannelAccess.from_files(tls_ca=path, environ={}),
    "--tls-cert": lambda path: ChannelAccess.from_files(tls_cert=path, tls_key=path, environ={}),
    "--tls-key": lambda path: ServerAccess.from_files(tls_key=path, environ={}),
    "--tls-client-ca": lambda path: ServerAccess.from_files(tls_client_ca=path, environ={}),
}


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    yield path
    # A reader still blocked in open() (the bug) is let go: a writer that opens and closes ends its wait.
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def refused_in_time(read, path) -> FarmError:
    """The error ``read(path)`` raises, failing the test if it blocks instead."""
    raised: list[BaseException] = []

    def attempt():
        try:
            read(path)
        except BaseException as exc:  # handed to the test below
            raised.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"reading {path} blocked"
    assert raised and isinstance(raised[0], FarmError), raised
    return raised[0]


@pytest.mark.parametrize("option", FILE_OPTIONS)
def test_a_fifo_is_refused_without_waiting_for_a_writer(fifo, option):
    refused = refused_in_time(FILE_OPTIONS[option], fifo)
    assert refused.exit_code == 2
    assert f"{option} {fifo} is not a regular file" in refused.problem


@pytest.mark.parametrize("option", FILE_OPTIONS)
def test_a_device_is_refused_unread(option):
    # /dev/null, not /dev/zero: were it read after all, it ends at once instead of filling memory.
    refused = refused_in_time(FILE_OPTIONS[option], "/dev/null")
    assert refused.exit_code == 2
    assert f"{option} /dev/null is not a regular file" in refused.problem


@pytest.mark.parametrize(("option", "limit"), [("--token-file", "64 KiB"), ("--tls-ca", "1 MiB"),
                                               ("--tls-cert", "1 MiB"), ("--tls-key", "1 MiB"),
                                               ("--tls-client-ca", "1 MiB")])
def test_a_file_larger_than_its_kind_can_be_is_refused(tmp_path, option, limit):
    huge = tmp_path / "huge"
    with huge.open("wb") as file:
        file.write(b"-----BEGIN CERTIFICATE-----\n")
        file.truncate(2 << 20)
    refused = refused_in_time(FILE_OPTIONS[option], huge)
    assert refused.exit_code == 2
    assert f"{option} {huge} is larger than {limit}" in refused.problem


def test_a_large_ca_bundle_is_read(tmp_path):
    block = CertificateAuthority(tmp_path / "pki").cert.read_text()
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(block * (600_000 // len(block)))  # some 600 KiB, as big as system CA bundles come
    assert ChannelAccess.from_files(tls_ca=bundle, environ={}).ca == bundle.read_bytes()


def test_a_ca_bundle_with_one_current_ca_is_read(tmp_path):
    """A system bundle holds CAs past their end beside current ones: only a file of none current is refused."""
    stale = CertificateAuthority(tmp_path / "stale", name="stale CA", valid=EXPIRED).cert.read_text()
    current = CertificateAuthority(tmp_path / "pki").cert.read_text()
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(stale + current)
    assert ChannelAccess.from_files(tls_ca=bundle, environ={}).ca == bundle.read_bytes()
    bundle.write_text(stale + stale)
    with pytest.raises(FarmError, match=r"--tls-ca .* expired on .* \(the first of 2, none current\)"):
        ChannelAccess.from_files(tls_ca=bundle, environ={})


def test_a_directory_is_refused_with_its_option(tmp_path):
    with pytest.raises(FarmError, match="--tls-ca .* is a directory") as refused:
        ChannelAccess.from_files(tls_ca=tmp_path, environ={})
    assert refused.value.exit_code == 2


@pytest.mark.parametrize(("listen", "loopback"), [
    ("127.0.0.1:50051", True), ("127.1.2.3:1", True), ("[::1]:50051", True), ("localhost:50051", True),
    ("unix:/run/farm.sock", True), ("0.0.0.0:50051", False), ("[::]:50051", False), ("10.0.0.5:50051", False),
    ("coordinator:50051", False), (":50051", False),
])
def test_loopback_addresses(listen, loopback):
    assert is_loopback(listen) is loopback


def test_tls_files_must_come_in_pairs(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n")
    with pytest.raises(FarmError, match="needs its key"):
        ServerAccess.from_files(tls_cert=pem, environ={})
    with pytest.raises(FarmError, match="mutual TLS, which needs TLS"):
        ServerAccess.from_files(tls_client_ca=pem, environ={})
    with pytest.raises(FarmError, match="needs its key"):
        ChannelAccess.from_files(tls_cert=pem, environ={})
    not_pem = tmp_path / "x.der"
    not_pem.write_bytes(b"\x30\x82")
    with pytest.raises(FarmError, match="is not a PEM file"):
        ChannelAccess.from_files(tls_ca=not_pem, environ={})
    with pytest.raises(FarmError, match="holds a certificate that cannot be read") as damaged:
        ChannelAccess.from_files(tls_ca=pem, environ={})
    assert damaged.value.exit_code == 2
    assert ChannelAccess.from_files(tls_ca=CertificateAuthority(tmp_path / "pki").cert, environ={}).tls
    assert not ChannelAccess.from_files(environ={"FARM_TOKEN": "t"}).tls


def test_no_token_beyond_loopback_is_refused():
    with pytest.raises(FarmError, match="beyond loopback"):
        ServerAccess().check_listen("0.0.0.0:50051")
    ServerAccess().check_listen("127.0.0.1:50051")
    ServerAccess(token="t").check_listen("0.0.0.0:50051")
