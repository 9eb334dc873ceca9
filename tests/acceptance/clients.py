"""Clients for a ``ServerProcess``, made the way a Triton user makes them.

In clear text they are the examples' own calls. Over TLS they are unmodified tritonclient with
``ssl=True`` and the CA that signed the server: ``ssl_options={"ca_certs": ...}`` (HTTP),
``ssl_context`` (HTTP aio), ``root_certificates`` (gRPC, sync and aio), plus the client
certificate when the server requires mutual TLS on gRPC.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import grpc
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpclient_aio

from tests.acceptance.server import ServerProcess


def http_client(server: ServerProcess, **options: Any) -> httpclient.InferenceServerClient:
    if server.pki:
        options |= {"ssl": True, "ssl_options": {"ca_certs": str(server.pki.ca)}}
    return httpclient.InferenceServerClient(url=server.http, **options)


def http_aio_client(server: ServerProcess, **options: Any) -> httpclient_aio.InferenceServerClient:
    if server.pki:
        options |= {"ssl": True, "ssl_context": server.ssl_context()}
    return httpclient_aio.InferenceServerClient(url=server.http, **options)


def grpc_client(
    server: ServerProcess, *, with_certificate: bool = True, **options: Any
) -> grpcclient.InferenceServerClient:
    """``with_certificate=False`` leaves out the client certificate a mutual-TLS server needs."""
    return grpcclient.InferenceServerClient(
        url=server.grpc, **options, **_grpc_tls_options(server, with_certificate)
    )


def grpc_aio_client(
    server: ServerProcess, *, with_certificate: bool = True, **options: Any
) -> grpcclient_aio.InferenceServerClient:
    return grpcclient_aio.InferenceServerClient(
        url=server.grpc, **options, **_grpc_tls_options(server, with_certificate)
    )


def grpc_channel(server: ServerProcess) -> grpc.Channel:
    """A bare gRPC channel, for the examples that call the generated stubs themselves."""
    if not server.pki:
        return grpc.insecure_channel(server.grpc)
    pki = server.pki
    client_pair = (
        {
            "private_key": pki.client_key.read_bytes(),
            "certificate_chain": pki.client_cert.read_bytes(),
        }
        if server.grpc_mutual
        else {}
    )
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes(), **client_pair)
    return grpc.secure_channel(server.grpc, credentials)


def metrics_text(server: ServerProcess) -> str:
    """The metrics port's Prometheus text (HTTPS when the server has certificates)."""
    url = f"{server.scheme}://{server.metrics}/metrics"
    with urllib.request.urlopen(url, timeout=10, context=server.ssl_context()) as response:
        return str(response.read().decode())


def _grpc_tls_options(server: ServerProcess, with_certificate: bool) -> dict[str, Any]:
    if not server.pki:
        return {}
    options: dict[str, Any] = {"ssl": True, "root_certificates": str(server.pki.ca)}
    if server.grpc_mutual and with_certificate:
        options |= {
            "private_key": str(server.pki.client_key),
            "certificate_chain": str(server.pki.client_cert),
        }
    return options
