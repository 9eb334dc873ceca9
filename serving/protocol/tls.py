"""TLS for the serving listeners, from the certificate files the settings name.

gRPC follows tritonserver: ``--grpc-use-ssl`` serves the ``--grpc-server-cert`` and
``--grpc-server-key`` pair with ``--grpc-root-cert`` as the trusted roots; ``--grpc-use-ssl-mutual``
also requires every client to present a certificate that chains to those roots. HTTP (which
tritonserver serves only in clear text) and the metrics port each get HTTPS from their own cert/key
pair. The files are read once at start-up: one that is missing or does not match stops the start.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc

from serving.settings import ServingSettings


def grpc_server_credentials(settings: ServingSettings) -> grpc.ServerCredentials | None:
    """The gRPC port's TLS credentials, or None for clear text."""
    if not settings.grpc_tls:
        return None
    assert settings.grpc_server_cert is not None and settings.grpc_server_key is not None
    roots = settings.grpc_root_cert.read_bytes() if settings.grpc_root_cert else None
    pair = (settings.grpc_server_key.read_bytes(), settings.grpc_server_cert.read_bytes())
    return grpc.ssl_server_credentials(
        [pair],
        root_certificates=roots,
        require_client_auth=settings.grpc_use_ssl_mutual,
    )


def grpc_ssl_context(settings: ServingSettings) -> ssl.SSLContext | None:
    """The same TLS as ``grpc_server_credentials``, for the HTTP/2 listener: TLS 1.2 or later
    (HTTP/2 and grpc both require it), ALPN ``h2``, and with ``--grpc-use-ssl-mutual`` a client
    certificate that chains to the roots."""
    if not settings.grpc_tls:
        return None
    assert settings.grpc_server_cert is not None and settings.grpc_server_key is not None
    for path in (settings.grpc_server_cert, settings.grpc_server_key, settings.grpc_root_cert):
        if path is not None:
            path.read_bytes()  # a missing file stops the start naming it, as grpc's reading does
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.grpc_server_cert, settings.grpc_server_key)
    if settings.grpc_root_cert is not None:
        context.load_verify_locations(cafile=settings.grpc_root_cert)
    context.verify_mode = ssl.CERT_REQUIRED if settings.grpc_use_ssl_mutual else ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    return context


def uvicorn_tls(cert: Path | None, key: Path | None) -> dict[str, Any]:
    """uvicorn ``Config`` options for HTTPS with this pair; none (clear text) without a cert."""
    if cert is None or key is None:
        return {}
    return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
