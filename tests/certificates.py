"""Throwaway certificates for the TLS tests: one CA and what it signed, as PEM files.

The server certificate names ``localhost`` and ``127.0.0.1`` so clients verify the host name as
they would in production; the client certificate is for gRPC's mutual TLS. Each lives one day.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class Pki:
    """PEM files of one throwaway CA and what it signed: a server and a client certificate."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Portico test CA")])
        ca = _builder(ca_name, ca_name, ca_key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
        ca_cert = ca.sign(ca_key, hashes.SHA256())
        self.ca = self._write("ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM))
        self.server_cert, self.server_key = self._leaf(
            "server", ca_cert, ca_key, ExtendedKeyUsageOID.SERVER_AUTH
        )
        self.client_cert, self.client_key = self._leaf(
            "client", ca_cert, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH
        )

    def _leaf(
        self,
        name: str,
        ca_cert: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey,
        usage: x509.ObjectIdentifier,
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"portico-{name}")])
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        cert = (
            _builder(subject, ca_cert.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return (
            self._write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{name}-key.pem", key_pem),
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        path.write_bytes(data)
        return path


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
