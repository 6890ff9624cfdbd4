"""What the TLS files hold, checked before gRPC is given them: certificates that are certificates,
a key that is its certificate's, and a certificate within its dates.

gRPC's core takes the PEM bytes unread; wrong ones come out as log lines of its own and a failure
that names no file (a key that is not its certificate's read "the port is in use" on the
coordinator). These checks name the option and the file, in one line each.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from foundation.errors import BadInput

if TYPE_CHECKING:
    from cryptography import x509

# Within this of its end a certificate still serves, with a warning at start: time to renew it.
EXPIRY_WARNING = dt.timedelta(days=7)

_PEM_LABEL = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


@dataclass(frozen=True)
class PemFile:
    """A PEM file's bytes and where they came from, as messages name it: ``--tls-cert cert.pem``."""

    option: str
    path: Path
    data: bytes

    def __str__(self) -> str:
        return f"{self.option} {self.path}"

    def labels(self) -> list[str]:
        return [label.decode() for label in _PEM_LABEL.findall(self.data)]

    def holds_key(self) -> bool:
        return any(label.endswith("PRIVATE KEY") for label in self.labels())

    def holds_certificate(self) -> bool:
        return "CERTIFICATE" in self.labels()


def check_ca(pem: PemFile, whose: str, now: dt.datetime) -> None:
    """Refuse a CA file that holds no readable certificate (a key, a request, damaged text), or
    none valid at ``now``: OpenSSL then refuses every certificate it signed, saying only "certificate
    verify failed". ``whose``: whose certificates the CA signs, in messages ("the coordinator's")."""
    fix = f"give the certificate of the CA that signs {whose} certificates"
    authorities = _certificates(pem, "CA certificate", fix)
    troubles = [validity_trouble(authority, now) for authority in authorities]
    if all(troubles):
        held = "" if len(authorities) == 1 else f" (the first of {len(authorities)}, none current)"
        raise BadInput(f"the CA certificate {pem} {troubles[0]}{held}",
                       f"{fix}, a current one; if it is current, check this box's clock (it reads {_when(now)})")


def check_pair(cert: PemFile, key: PemFile, now: dt.datetime) -> "x509.Certificate":
    """The certificate (the first of the chain in ``cert``), once ``key`` is shown to be its key
    and ``now`` within its dates; refused (exit 2) with what is wrong otherwise."""
    from cryptography.hazmat.primitives import serialization

    if cert.holds_key() and not cert.holds_certificate() and key.holds_certificate() and not key.holds_key():
        raise BadInput(f"{cert} is a private key and {key} a certificate",
                       f"swap them: {cert.option} takes the certificate, {key.option} its key")
    leaf = _certificates(cert, "certificate", f"give the certificate there; its key goes to {key.option}")[0]
    private_key = _private_key(key, cert)
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if private_key.public_key().public_bytes(*public) != leaf.public_key().public_bytes(*public):
        raise BadInput(f"the key {key} does not match the certificate {cert}",
                       "give the key the certificate was issued for (the first certificate in the file is the one "
                       "served)")
    trouble = validity_trouble(leaf, now)
    if trouble is not None:
        raise BadInput(f"the certificate {cert} {trouble}",
                       f"renew it with the CA that signed it; if it is current, check this box's clock "
                       f"(it reads {_when(now)})")
    return leaf


def validity_trouble(cert: "x509.Certificate", now: dt.datetime) -> str | None:
    """Why ``cert`` is not valid at ``now`` ("expired on ..."), or None when it is."""
    if now < cert.not_valid_before_utc:
        return f"is not valid until {_when(cert.not_valid_before_utc)}"
    if now > cert.not_valid_after_utc:
        return f"expired on {_when(cert.not_valid_after_utc)}"
    return None


def expiry_warning(cert: "x509.Certificate", where: PemFile, now: dt.datetime) -> str | None:
    """A warning line when ``cert`` ends within EXPIRY_WARNING of ``now``, else None."""
    left = cert.not_valid_after_utc - now
    if left > EXPIRY_WARNING:
        return None
    hours = int(left.total_seconds() // 3600)
    return (f"warning: the certificate {where} expires on {_when(cert.not_valid_after_utc)}, in {hours} hours: "
            "renew it before then, or callers will refuse to connect\n")


def names(cert: "x509.Certificate") -> list[str]:
    """The host names and addresses ``cert`` is for: its subject alternative names, else its common name."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        alternative = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [str(attribute.value) for attribute in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return [*alternative.get_values_for_type(x509.DNSName),
            *(str(address) for address in alternative.get_values_for_type(x509.IPAddress))]


def _certificates(pem: PemFile, what: str, fix: str) -> list["x509.Certificate"]:
    from cryptography import x509

    if not pem.holds_certificate():
        if pem.holds_key():
            raise BadInput(f"{pem} is a private key, not a {what}", f"{fix}; never hand a private key around")
        shown = ", ".join(sorted(set(pem.labels()))) or "none"
        raise BadInput(f"{pem} holds no {what} (its PEM blocks: {shown})", fix)
    try:
        return x509.load_pem_x509_certificates(pem.data)
    except ValueError as err:
        raise BadInput(f"{pem} holds a certificate that cannot be read ({_first_line(err)})",
                       f"{fix}, whole and PEM-encoded") from None


def _private_key(key: PemFile, cert: PemFile):
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    if not key.holds_key():
        if key.holds_certificate():
            raise BadInput(f"{key} is a certificate, not a private key",
                           f"give the key of {cert.option} there")
        shown = ", ".join(sorted(set(key.labels()))) or "none"
        raise BadInput(f"{key} holds no private key (its PEM blocks: {shown})",
                       f"give the key of {cert.option} there")
    try:
        return serialization.load_pem_private_key(key.data, password=None)
    except TypeError:  # cryptography's word for a key that needs a passphrase
        raise BadInput(f"{key} is encrypted with a passphrase, which gRPC cannot ask for",
                       "decrypt it (`openssl pkey -in KEY -out PLAIN`) and let only this user read it") from None
    except (ValueError, UnsupportedAlgorithm) as err:
        raise BadInput(f"{key} holds a private key that cannot be read ({_first_line(err)})",
                       "give the key whole and PEM-encoded (RSA, EC or Ed25519)") from None


def _first_line(err: Exception) -> str:
    text = str(err).split("\n", 1)[0]
    return text if len(text) <= 120 else text[:120] + "…"


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
