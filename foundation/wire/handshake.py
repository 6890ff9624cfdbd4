"""Why a caller got no TLS connection to the coordinator, in words a person acts on.

gRPC's status says little: "certificate verify failed" for a certificate expired or signed by
another CA, "Hostname Verification Check failed" without the names, and "Socket closed" when a
mutual-TLS coordinator refuses the caller's certificate, the same words as for a plaintext call
to a TLS port. After such a failure the caller makes one connection of its own with Python's ssl
module, presenting the same CA and certificate, and reads what went wrong from it.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from foundation.clock import utc_now
from foundation.wire.access import TLS_FIX, ChannelAccess, tls_trouble
from foundation.wire.certificates import names, validity_trouble

if TYPE_CHECKING:
    from cryptography import x509

PROBE_TIMEOUT_S = 5.0
TLS_CA_FIX = ("give --tls-ca (FARM_TLS_CA) naming the CA of its certificate, and with mutual TLS --tls-cert and "
              "--tls-key (FARM_TLS_CERT, FARM_TLS_KEY)")
CLIENT_CERT_FIX = ("give --tls-cert and --tls-key (FARM_TLS_CERT, FARM_TLS_KEY): a certificate signed by the CA "
                   "the coordinator's --tls-client-ca names, and its key")
# OpenSSL's X509_V_ERR_* codes of a certificate whose issuer the caller does not trust.
_UNTRUSTED_ISSUER = {2, 18, 19, 20, 21}
_EXPIRED, _NOT_YET_VALID = 10, 9
# ...of a certificate for other names than the one dialled: a host name, an IP address.
_NAME_MISMATCH = {62, 64}


@dataclass(frozen=True)
class TlsFailure:
    """What was wrong with a TLS connection (``problem``) and what to do (``fix``)."""

    problem: str
    fix: str


def tls_failure(details: str, address: str | None = None, access: ChannelAccess | None = None) -> TlsFailure | None:
    """Why a call to ``address`` that ended UNAVAILABLE with ``details`` had no TLS connection,
    or None when it failed otherwise (nothing listens there, or it speaks plaintext and the
    caller too). Without ``address`` it is told from gRPC's words alone."""
    access = access or ChannelAccess()
    said = tls_trouble(details)
    # "Socket closed": a mutual-TLS coordinator that refused the caller's certificate, or a TLS
    # coordinator called in plaintext.
    if address is not None and access.tls and (said is not None or "Socket closed" in details):
        found = _probe(address, access)
        if found is not None:
            return found
    if address is not None and not access.tls and "Socket closed" in details and _serves_tls(address):
        return TlsFailure("the coordinator serves TLS, and this call was plaintext", TLS_CA_FIX)
    return None if said is None else TlsFailure(said, TLS_FIX)


def _host_port(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    if not host or "/" in host or not port.isdigit():
        return None  # a gRPC target (dns:///..., unix:...): gRPC's own words stand
    return host.strip("[]"), int(port)


def _serves_tls(address: str) -> bool:
    """Whether a TLS handshake with ``address`` succeeds, its certificate unchecked."""
    where = _host_port(address)
    if where is None:
        return False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection(where, PROBE_TIMEOUT_S) as raw, \
                context.wrap_socket(raw, server_hostname=where[0]):
            return True
    except (OSError, ssl.SSLError, ValueError):
        return False


def _probe(address: str, access: ChannelAccess) -> TlsFailure | None:
    where = _host_port(address)
    if where is None:
        return None
    host, port = where
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])  # as gRPC offers it; a gRPC server may refuse a client without it
    try:
        if access.ca is not None:
            context.load_verify_locations(cadata=access.ca.decode("ascii", "replace"))
        else:
            context.load_default_certs()
        if access.cert_file is not None and access.key_file is not None:
            context.load_cert_chain(access.cert_file, access.key_file)
    except (OSError, ssl.SSLError):
        return None  # the files changed since they were checked: gRPC's own words stand
    try:
        with socket.create_connection((host, port), PROBE_TIMEOUT_S) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            # TLS 1.3 sends the caller's certificate after the handshake; a coordinator that
            # refuses it closes the connection instead of sending HTTP/2's first frame.
            return None if tls.recv(1) else _client_refused(access)
    except ssl.SSLCertVerificationError as err:
        return _certificate_refused(err, host, port, access)
    except ssl.SSLError as err:
        if err.reason == "WRONG_VERSION_NUMBER":  # what a TLS client reads from a plaintext server
            return TlsFailure("the coordinator speaks plaintext, not TLS",
                              "call it without --tls-ca, --tls-cert and --tls-key (FARM_TLS_CA, FARM_TLS_CERT, "
                              "FARM_TLS_KEY), or serve it over TLS (its --tls-cert and --tls-key)")
        return None
    except (OSError, ValueError):  # ValueError: a name ssl or IDNA cannot encode
        return None


def _client_refused(access: ChannelAccess) -> TlsFailure:
    if access.cert is None:
        return TlsFailure("the coordinator demands a client certificate (mutual TLS), and none was given",
                          CLIENT_CERT_FIX)
    return TlsFailure(f"the coordinator refused the client certificate --tls-cert {access.cert_file} (mutual TLS): "
                      "it trusts another CA", CLIENT_CERT_FIX)


def _certificate_refused(err: ssl.SSLCertVerificationError, host: str, port: int,
                         access: ChannelAccess) -> TlsFailure:
    cert = _served_certificate(host, port)
    code = err.verify_code
    trouble = validity_trouble(cert, utc_now()) if cert is not None and code in (_EXPIRED, _NOT_YET_VALID) else None
    if trouble is not None:
        return TlsFailure(f"certificate verify failed: the coordinator's certificate {trouble}",
                          "the coordinator needs a current certificate (its --tls-cert and --tls-key), and a "
                          "restart; if it has one, check the clocks of this box and the coordinator's")
    if cert is not None and code in _NAME_MISMATCH:
        held = ", ".join(names(cert)) or "no name"
        return TlsFailure(f"certificate verify failed: the coordinator's certificate is for {held}, not {host}",
                          "connect by a name the certificate holds (--coordinator, FARM_COORDINATOR), or give the "
                          f"coordinator a certificate that names {host}")
    if cert is not None and code in _UNTRUSTED_ISSUER:
        trusted = "the CA in --tls-ca" if access.ca is not None else "this box's trusted CAs"
        return TlsFailure(f"certificate verify failed: the coordinator's certificate is signed by "
                          f"{cert.issuer.rfc4514_string()!r}, which is not {trusted}", TLS_FIX)
    return TlsFailure(f"certificate verify failed: {err.verify_message}", TLS_FIX)


def _served_certificate(host: str, port: int) -> x509.Certificate | None:
    """The certificate the coordinator serves, read without trusting it."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), PROBE_TIMEOUT_S) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der) if der else None
    except (OSError, ssl.SSLError, ValueError):
        return None
