"""The compose proxy's TLS certificate: made on the first start, kept on every later one.

``python deploy/tls/first_start_cert.py DIR [HOST ...]`` writes ``DIR/tls.crt`` and ``DIR/tls.key``
(a self-signed certificate for the hosts named, ``localhost`` and ``127.0.0.1`` by default, valid
for two years) unless both already exist. To bring your own certificate, put your ``tls.crt``
(chain first) and ``tls.key`` into that folder (the ``tls`` volume) before the first start, or
replace them and restart the proxy.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_FOR = datetime.timedelta(days=730)


def ensure_certificate(directory: Path, hosts: list[str]) -> bool:
    """Write a certificate and key into ``directory`` unless both exist; True when written."""
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    if cert_path.exists() and key_path.exists():
        return False
    key = ec.generate_private_key(ec.SECP256R1())
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    cert_path.write_bytes(_self_signed(key, hosts).public_bytes(serialization.Encoding.PEM))
    return True


def _self_signed(key: ec.EllipticCurvePrivateKey, hosts: list[str]) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    names = sys.argv[2:] or ["localhost", "127.0.0.1"]
    written = ensure_certificate(folder, names)
    print(f"{'made' if written else 'kept'} {folder / 'tls.crt'} for {', '.join(names)}")
