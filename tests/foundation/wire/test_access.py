"""Where the token and TLS files come from, and what is refused before any call is made."""

from __future__ import annotations

import pytest

from foundation.errors import FarmError
from foundation.wire.access import ChannelAccess, ServerAccess, is_loopback, read_token


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
    assert ChannelAccess.from_files(tls_ca=pem, environ={}).tls
    assert not ChannelAccess.from_files(environ={"FARM_TOKEN": "t"}).tls


def test_no_token_beyond_loopback_is_refused():
    with pytest.raises(FarmError, match="beyond loopback"):
        ServerAccess().check_listen("0.0.0.0:50051")
    ServerAccess().check_listen("127.0.0.1:50051")
    ServerAccess(token="t").check_listen("0.0.0.0:50051")
