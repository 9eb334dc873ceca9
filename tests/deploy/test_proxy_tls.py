"""The compose proxy terminates TLS as shipped: the real ``deploy/nginx.conf`` run by a real nginx.

The certificate is the one ``deploy/tls/first_start_cert.py`` makes on the first start (run here
as compose runs it). Behind the proxy: a real ``serve`` process (the inference upstream, clear text
as in compose) and a small HTTP echo server standing in for the console, which answers with what
reached it. What differs from compose is listed and checked in ``tests/deploy/nginx_proxy.py``.
"""

from __future__ import annotations

import difflib
import http.client
import json
import queue
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from tests.acceptance.expectations import assert_add_sub, simple_data
from tests.acceptance.server import ServerProcess, run_server
from tests.deploy.nginx_proxy import (
    ROOT,
    SHIPPED_CONFIG,
    TEMP_FOLDERS,
    NginxProcess,
    ProxyPorts,
    local_config,
    nginx_binary,
    nginx_version,
    run_folder,
    running_nginx,
)
from tests.ports import free_port

NGINX = nginx_binary()

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.skipif(
        NGINX is None,
        reason="no nginx binary (`make install` unpacks Debian's nginx into the venv)",
    ),
]

MODEL = "simple"
INFERENCE_BODY_CAP = 64 * 1024 * 1024  # the shipped http-level client_max_body_size 64m


@dataclass
class Proxy:
    nginx: NginxProcess
    ports: ProxyPorts
    certificate: Path  # the self-signed tls.crt: the one thing a client needs to trust
    serving: ServerProcess

    def https_connection(self, port: int) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.certificate))
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=context)


# --- the console's stand-in -----------------------------------------------------------------


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with its method, path, headers and the body's length, as JSON."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        received = 0
        while received < length:
            chunk = self.rfile.read(min(1 << 20, length - received))
            if not chunk:
                break
            received += len(chunk)
        body = json.dumps({
            "method": self.command, "path": self.path, "body_bytes": received,
            "headers": [[name.lower(), value] for name, value in self.headers.items()],
        }).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the test reads what it needs from the answers


@pytest.fixture(scope="module")
def console_echo() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- the proxy in front of both -------------------------------------------------------------


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("proxy-models")
    dm.write_onnx_add_sub(repo, MODEL, dims=(16,), max_batch_size=8)
    with run_server(repo) as running:
        yield running


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the compose ``tls-cert`` service does on the first start, run for real."""
    folder = tmp_path_factory.mktemp("tls")
    made = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "tls" / "first_start_cert.py"), str(folder)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert made.stdout.startswith("made "), made.stdout
    return folder


@pytest.fixture(scope="module")
def proxy(serving: ServerProcess, console_echo: int, tls_dir: Path) -> Iterator[Proxy]:
    assert NGINX is not None
    ports = ProxyPorts(
        redirect=free_port(), console=free_port(), inference_http=free_port(),
        inference_grpc=free_port(), upstream_console=console_echo,
        upstream_http=int(serving.http.rsplit(":", 1)[1]),
        upstream_grpc=int(serving.grpc.rsplit(":", 1)[1]),
    )  # fmt: skip
    listen = [ports.redirect, ports.console, ports.inference_http, ports.inference_grpc]
    with run_folder() as folder:
        config = local_config(
            SHIPPED_CONFIG.read_text(), ports, tls_dir, folder, nginx_version(NGINX)
        )
        with running_nginx(NGINX, config, folder, listen) as nginx:
            yield Proxy(nginx, ports, tls_dir / "tls.crt", serving)


# --- the configuration under test is the shipped one ----------------------------------------


def test_only_the_documented_lines_differ_from_the_shipped_configuration(proxy: Proxy) -> None:
    shipped = SHIPPED_CONFIG.read_text().splitlines()
    running = proxy.nginx.config_path.read_text().splitlines()
    diff = [(line[0], line[2:].strip()) for line in difflib.ndiff(shipped, running)]
    removed = [line for sign, line in diff if sign == "-"]
    added = [line for sign, line in diff if sign == "+"]
    assert removed and all(
        line.startswith(
            ("listen ", "server serving:", "server console:", "ssl_certificate", "http2 on;")
        )  # fmt: skip
        for line in removed
    ), removed
    assert all(
        line.startswith(("listen 127.0.0.1:", "server 127.0.0.1:", "ssl_certificate",
                         "access_log ", *(f"{name}_temp_path " for name in TEMP_FOLDERS)))
        for line in added
    ), added  # fmt: skip
    checked = proxy.nginx.check()
    assert checked.returncode == 0, checked.stderr


# --- inference: HTTPS and gRPC over TLS, nothing in clear text ------------------------------


def test_https_inference_through_the_proxy_with_tritonclient(proxy: Proxy) -> None:
    client = httpclient.InferenceServerClient(
        f"127.0.0.1:{proxy.ports.inference_http}", ssl=True,
        ssl_options={"ca_certs": str(proxy.certificate)},
    )  # fmt: skip
    try:
        assert client.is_server_ready()
        input0, input1 = simple_data()
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                  httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
        inputs[0].set_data_from_numpy(input0)
        inputs[1].set_data_from_numpy(input1, binary_data=False)
        result = client.infer(MODEL, inputs)
        assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
    finally:
        client.close()


def test_grpc_over_tls_through_the_proxy_unary_and_stream(proxy: Proxy) -> None:
    input0, input1 = simple_data()
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
              grpcclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(
        f"127.0.0.1:{proxy.ports.inference_grpc}", ssl=True,
        root_certificates=str(proxy.certificate),
    ) as client:  # fmt: skip
        assert client.is_server_ready()
        result = client.infer(MODEL, inputs, client_timeout=30)
        assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
        # A bidirectional stream: HTTP/2 all the way through the proxy.
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for request_id in ("a", "b"):
            client.async_stream_infer(MODEL, inputs, request_id=request_id)
        streamed = [answers.get(timeout=30) for _ in range(2)]
        client.stop_stream()
    for answer in streamed:
        assert not isinstance(answer, InferenceServerException), answer
        assert_add_sub(input0, input1, answer.as_numpy("OUTPUT0"), answer.as_numpy("OUTPUT1"))
    assert sorted(answer.get_response().id for answer in streamed) == ["a", "b"]


def test_plain_http_to_the_inference_tls_port_is_refused(proxy: Proxy) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.ports.inference_http, timeout=30)
    try:
        connection.request("GET", "/v2/health/ready")
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    # nginx's own answer on an ssl listener: nothing is forwarded to serving.
    assert response.status == 400
    assert b"The plain HTTP request was sent to HTTPS port" in body


def test_plain_grpc_to_the_grpc_tls_port_is_refused(proxy: Proxy) -> None:
    with (
        grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.ports.inference_grpc}") as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.is_server_live(client_timeout=10)
    assert caught.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def test_an_inference_body_over_the_cap_gets_413_before_it_is_sent(proxy: Proxy) -> None:
    connection = proxy.https_connection(proxy.ports.inference_http)
    try:
        # Only the headers go out: nginx judges the declared length and answers at once.
        connection.putrequest("POST", f"/v2/models/{MODEL}/infer")
        connection.putheader("Content-Type", "application/octet-stream")
        connection.putheader("Content-Length", str(INFERENCE_BODY_CAP + 1))
        connection.endheaders()
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    assert response.status == 413


# --- the console: redirect to HTTPS, forwarded headers set by the proxy, its own body cap ---


def test_port_80_redirects_to_https(proxy: Proxy) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.ports.redirect, timeout=30)
    try:
        connection.request("GET", "/models/?page=2", headers={"Host": "portico.example"})
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    assert response.status == 301
    assert response.getheader("Location") == "https://portico.example/models/?page=2"


def test_the_console_gets_x_forwarded_proto_from_the_proxy_never_from_the_client(
    proxy: Proxy,
) -> None:
    connection = proxy.https_connection(proxy.ports.console)
    try:
        connection.request("GET", "/login/", headers={
            "Host": "portico.example", "X-Forwarded-Proto": "http",
            "X-Forwarded-For": "203.0.113.9",
        })  # fmt: skip
        response = connection.getresponse()
        echoed = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200
    headers: dict[str, list[str]] = {}
    for name, value in echoed["headers"]:
        headers.setdefault(name, []).append(value)
    assert echoed["path"] == "/login/"
    assert headers["x-forwarded-proto"] == ["https"]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]  # the connection's address, not the claim
    assert headers["host"] == ["portico.example"]


def test_the_console_port_takes_uploads_larger_than_the_inference_cap(proxy: Proxy) -> None:
    body = np.zeros(INFERENCE_BODY_CAP + 1024, dtype=np.uint8).tobytes()
    connection = proxy.https_connection(proxy.ports.console)
    try:
        connection.request("POST", "/upload/", body=body,
                           headers={"Content-Type": "application/octet-stream"})  # fmt: skip
        response = connection.getresponse()
        echoed = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200
    assert echoed["body_bytes"] == len(body)
