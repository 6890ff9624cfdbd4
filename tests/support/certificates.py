"""Certificates made for a test: a CA, server certificates (for loopback unless named otherwise),
client certificates, and ones out of their validity window."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
VALID_NOW = (-dt.timedelta(minutes=5), dt.timedelta(days=30))
EXPIRED = (-dt.timedelta(days=30), -dt.timedelta(days=1))
NOT_YET_VALID = (dt.timedelta(days=1), dt.timedelta(days=30))


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass
class CertificateAuthority:
    """A certificate authority whose certificate and key live in ``directory``."""

    directory: Path
    name: str = "tvm-farm test CA"
    valid: tuple[dt.timedelta, dt.timedelta] = VALID_NOW  # the CA's own certificate, from now

    def __post_init__(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        self._cert = (
            _builder(subject, subject, self._key.public_key(), self.valid)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = self.directory / f"{_file_name(self.name)}.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, server: bool, names: tuple[str, ...] = LOOPBACK_NAMES,
              valid: tuple[dt.timedelta, dt.timedelta] = VALID_NOW) -> Issued:
        """A certificate signed by this CA: for a server known by ``names`` (host names and IP
        addresses), or a client; valid from ``valid[0]`` to ``valid[1]`` from now."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
                           self._cert.subject, key.public_key(), valid)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(name) for name in names]),
                                            critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        cert = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).sign(self._key, hashes.SHA256())
        stem = self.directory / _file_name(common_name)
        issued = Issued(stem.with_suffix(".crt"), stem.with_suffix(".key"))
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        issued.key.chmod(0o600)
        return issued


def _builder(subject: x509.Name, issuer: x509.Name, public_key,
             valid: tuple[dt.timedelta, dt.timedelta] = VALID_NOW) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now + valid[0]).not_valid_after(now + valid[1]))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _file_name(name: str) -> str:
    return name.replace(" ", "-")
