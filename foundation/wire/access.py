"""Who may call the coordinator: the shared token and the TLS material, for both ends of a channel.

Every caller (agents, the CLI) sends the farm's shared token as ``authorization: Bearer <token>``
metadata on every call; the coordinator compares it with its own (coordinator.access). TLS is
optional and independent: with a server certificate the coordinator speaks only TLS, and with a
client CA it also demands a certificate signed by that CA from every caller (mutual TLS).

The token comes from a file (``--token-file``, FARM_TOKEN_FILE) or from FARM_TOKEN, the token
itself; the file wins when both are set. It is never taken from a command line, where ``ps``
shows it. Files are read once, when a process starts.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from foundation.clock import utc_now
from foundation.errors import BadInput, FarmError, path_error
from foundation.wire.certificates import PemFile, check_ca, check_pair, expiry_warning

TOKEN_METADATA_KEY = "authorization"
TOKEN_SCHEME = "Bearer "
TOKEN_ENV = "FARM_TOKEN"
TOKEN_HELP = "set FARM_TOKEN to the token, or --token-file / FARM_TOKEN_FILE to a file holding it"
# Far above any real token or PEM bundle (a CA bundle is some hundreds of KiB), far below what
# /dev/zero or a wrong multi-GB file would take of memory if read whole.
TOKEN_MAX_BYTES = 64 * 1024
PEM_MAX_BYTES = 1024 * 1024


def _read_small_file(path: Path, option: str, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` that ``option`` names (``what`` it is, in messages:
    "token file"), refused (exit 2) when it is anything else or larger than ``max_bytes``."""
    try:
        # stat before open: opening a FIFO waits for a writer, and opening a device can act on it.
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            # O_NONBLOCK in case a FIFO took the file's place since the stat; fstat tells.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as file:
                mode = os.fstat(file.fileno()).st_mode
                # Read, not the stat's size: /proc files report 0 bytes, and a file may grow.
                data = file.read(max_bytes + 1) if stat.S_ISREG(mode) else b""
    except OSError as err:
        raise path_error(err, path, doing=f"read the {what}") from None
    if stat.S_ISDIR(mode):
        raise BadInput(f"{option} {path} is a directory, not the {what}", "give a file there, not a directory")
    if not stat.S_ISREG(mode):
        raise BadInput(f"{option} {path} is not a regular file",
                       "give the path of an ordinary file: a FIFO, socket or device is not read")
    if len(data) > max_bytes:
        limit = f"{max_bytes >> 20} MiB" if max_bytes >= 1 << 20 else f"{max_bytes >> 10} KiB"
        raise BadInput(f"{option} {path} is larger than {limit}, more than any {what} holds",
                       f"check {option}: it names another file")
    return data


def read_token(token_file: Path | str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The shared token from ``token_file``, else FARM_TOKEN, else None."""
    if token_file:
        path = Path(token_file).expanduser()
        try:
            text = _read_small_file(path, "--token-file", "token file", TOKEN_MAX_BYTES).decode()
        except UnicodeDecodeError:
            raise BadInput(f"the token file {path} is not text", "put the token in it, e.g. `openssl rand -hex 32`") \
                from None
        return _checked_token(text, f"the token file {path}")
    if environ.get(TOKEN_ENV):
        return _checked_token(environ[TOKEN_ENV], TOKEN_ENV)
    return None


def _checked_token(text: str, source: str) -> str:
    token = text.strip()
    if not token:
        raise FarmError(f"{source} is empty", "put the token in it, e.g. `openssl rand -hex 32`")
    # gRPC metadata values are printable ASCII; anything else would fail on every call instead.
    if not all(" " < ch <= "~" for ch in token):
        raise FarmError(f"{source} holds characters a token cannot have (spaces, control or non-ASCII)",
                        "use printable ASCII without spaces, e.g. `openssl rand -hex 32`")
    return token


def read_pem(path: Path | str | None, option: str, what: str) -> PemFile | None:
    if not path:
        return None
    path = Path(path).expanduser()
    data = _read_small_file(path, option, what, PEM_MAX_BYTES)
    if b"-----BEGIN " not in data:
        raise FarmError(f"the {what} {path} is not a PEM file", "give the PEM-encoded file (-----BEGIN ...)")
    return PemFile(option, path, data)


def read_certificate(cert_path, key_path) -> tuple[PemFile | None, PemFile | None]:
    """A certificate and its key (PEM), both or neither; what they hold is checked by the caller."""
    cert, key = read_pem(cert_path, "--tls-cert", "TLS certificate"), read_pem(key_path, "--tls-key", "TLS key")
    if (cert is None) != (key is None):
        raise FarmError("a TLS certificate needs its key, and a key its certificate",
                        "give both --tls-cert and --tls-key (FARM_TLS_CERT, FARM_TLS_KEY), or neither")
    return cert, key


def is_loopback(listen: str) -> bool:
    """Whether a listen address (host:port, [v6]:port, unix:path) is reachable from this box only."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rsplit(":", 1)[0].strip("[]") if ":" in listen else listen
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to may be reachable from elsewhere


@dataclass(frozen=True)
class ChannelAccess:
    """What a caller presents: the token, and for TLS the CA it trusts (None: the system's)
    and, for mutual TLS, its own certificate and key (PEM bytes, and the files they came from,
    which foundation.wire.handshake presents again to learn why a handshake failed)."""

    token: str | None = None
    tls: bool = False
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    @classmethod
    def from_files(cls, token_file=None, tls_ca=None, tls_cert=None, tls_key=None,
                   environ: Mapping[str, str] = os.environ) -> "ChannelAccess":
        """From the options every command that calls a coordinator takes. Any TLS file means TLS."""
        cert, key = read_certificate(tls_cert, tls_key)
        ca = read_pem(tls_ca, "--tls-ca", "TLS CA certificate")
        now = utc_now()
        if ca is not None:
            check_ca(ca, "the coordinator's", now)
        if cert is not None:
            check_pair(cert, key, now)  # the coordinator would refuse an expired one, saying nothing
        return cls(read_token(token_file, environ), tls=bool(ca or cert), ca=ca and ca.data,
                   cert=cert and cert.data, key=key and key.data, cert_file=cert and cert.path,
                   key_file=key and key.path)


def open_channel(address: str, access: ChannelAccess | None = None, options=None) -> grpc.Channel:
    """A channel to the coordinator at ``address`` that presents ``access`` on every call."""
    from foundation.wire import CHANNEL_OPTIONS

    access = access or ChannelAccess()
    options = CHANNEL_OPTIONS if options is None else options
    if access.tls:
        credentials = grpc.ssl_channel_credentials(root_certificates=access.ca, private_key=access.key,
                                                   certificate_chain=access.cert)
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    if access.token is None:
        return channel
    return grpc.intercept_channel(channel, _BearerToken(access.token))


class _CallDetails(
    collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                                            "compression")),
    grpc.ClientCallDetails,
):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call's metadata, whatever the channel's transport (plaintext on
    loopback, TLS elsewhere): gRPC's own call credentials refuse plaintext channels."""

    def __init__(self, token: str):
        self._metadata = ((TOKEN_METADATA_KEY, TOKEN_SCHEME + token),)

    def _with_token(self, details):
        return _CallDetails(details.method, details.timeout, tuple(details.metadata or ()) + self._metadata,
                            details.credentials, details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)


@dataclass(frozen=True)
class ServerAccess:
    """What the coordinator demands: the token (None: none), and for TLS its certificate and
    key, and the CA that signs callers' certificates (mutual TLS)."""

    token: str | None = None
    cert: bytes | None = None
    key: bytes | None = None
    client_ca: bytes | None = None
    # A line for the log at start when the certificate ends soon (certificates.EXPIRY_WARNING).
    expiry_warning: str | None = None

    @classmethod
    def from_files(cls, token_file=None, tls_cert=None, tls_key=None, tls_client_ca=None,
                   environ: Mapping[str, str] = os.environ) -> "ServerAccess":
        """Refuses (exit 2) files that are not what their option takes, a key that is not the
        certificate's, and a certificate out of its dates: gRPC would log its own lines and
        fail, or serve a certificate every caller refuses."""
        cert, key = read_certificate(tls_cert, tls_key)
        client_ca = read_pem(tls_client_ca, "--tls-client-ca", "client CA certificate")
        if client_ca is not None and cert is None:
            raise FarmError("--tls-client-ca asks for mutual TLS, which needs TLS",
                            "give the coordinator's --tls-cert and --tls-key too")
        warning, now = None, utc_now()
        if cert is not None:
            warning = expiry_warning(check_pair(cert, key, now), cert, now)
        if client_ca is not None:
            check_ca(client_ca, "callers'", now)
        return cls(read_token(token_file, environ), cert and cert.data, key and key.data,
                   client_ca and client_ca.data, warning)

    @property
    def tls(self) -> bool:
        return self.cert is not None

    def credentials(self) -> grpc.ServerCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.client_ca,
                                           require_client_auth=self.client_ca is not None)

    def check_listen(self, listen: str) -> None:
        """Refuse to serve beyond loopback without a token: anyone who can reach the port could
        register agents, submit jobs and cancel them."""
        if self.token is None and not is_loopback(listen):
            raise FarmError(f"the coordinator would listen on {listen}, beyond loopback, without a token",
                            f"{TOKEN_HELP} (e.g. `openssl rand -hex 32 > token`), and give agents and "
                            "clients the same; or listen on 127.0.0.1")


# What anyone who reaches each kind of port can do: neither TVM's tracker nor /metrics checks the token.
_OPEN_PORTS = {
    "tracker": ("the TVM RPC tracker", "list this farm's RPC servers and take them to run code on"),
    "metrics": ("Prometheus metrics", "read the farm's jobs, agents and figures"),
}


def open_port_warnings(token: str | None, **listens: str | None) -> list[str]:
    """Warning lines for ports (``tracker=``, ``metrics=``: their listen addresses, None when
    not served) that listen beyond loopback on a farm without a token, for stderr at start."""
    if token is not None:
        return []
    warnings = []
    for kind, listen in listens.items():
        if listen and not is_loopback(listen):
            what, can = _OPEN_PORTS[kind]
            warnings.append(f"warning: {what} listens on {listen}, beyond loopback, and this farm has no token: "
                            f"anyone who reaches it can {can}; listen on 127.0.0.1, or firewall the port and "
                            f"{TOKEN_HELP}\n")
    return warnings


# What gRPC says when the two ends disagree about TLS or its certificates.
_TLS_TROUBLE = re.compile(r"ssl|tls|handshake|certificate|hostname verification", re.IGNORECASE)
TLS_FIX = ("a coordinator serving TLS needs --tls-ca (FARM_TLS_CA) naming the CA of its certificate, and with "
           "mutual TLS --tls-cert and --tls-key; a plaintext one needs none of them")


def tls_trouble(details: str) -> str | None:
    """What a failed TLS handshake came to, in words (OpenSSL's last reason: "certificate verify
    failed"), or None for a call that failed otherwise. gRPC wraps it in "failed to connect to all
    addresses; last error: UNKNOWN: ipv4:...: Tls handshake failed (...): ...: OK", which is
    neither one line a person reads nor what is wrong (bug 9 of issue 27); the CLI's errors and
    an agent's log say it this way."""
    if not _TLS_TROUBLE.search(details):
        return None
    reasons = re.findall(r"OPENSSL_internal:([A-Z0-9_]+)", details)
    if reasons:
        return reasons[-1].replace("_", " ").lower()
    text = details.split("last error: ", 1)[-1]
    return text if len(text) <= 200 else text[:200] + "…"


# Target schemes gRPC resolves itself (dns:///host:port, unix:/path, ...): passed on unchecked.
_GRPC_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?):(\d{1,5})")


def check_address(address: str, what: str = "--coordinator") -> None:
    """Refuse what is not a host:port address, as bad input before any call; a well-formed one
    that does not answer is unreachable (exit 4), which only a call can tell."""
    if address.startswith(_GRPC_SCHEMES):
        return
    shown = address if len(address) <= 100 else address[:100] + "…"
    match = _HOST_PORT.fullmatch(address)
    if match is None:
        raise BadInput(f"{what} {shown!r} is not a host:port address",
                       "give it as host:port, e.g. 127.0.0.1:50051 or farm.example.com:50051")
    if not 1 <= int(match.group(2)) <= 65535:
        raise BadInput(f"{what} {shown!r} has port {match.group(2)}, not one from 1 to 65535",
                       "give the port the coordinator listens on")
