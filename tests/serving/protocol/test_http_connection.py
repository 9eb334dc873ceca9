"""The data plane's HTTP/1.1 connection protocol on its own, over real sockets: framing, flow,
keep-alive, pipelining, and the refusals (malformed requests, oversized headers), behind a small
ASGI app whose every route is a case below."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from serving.protocol.http.connection import MAX_HEADER_BYTES
from serving.protocol.http.listener import data_plane_server

pytestmark = pytest.mark.embedded

KEEP_ALIVE_S = 0.5
SEND_TIMEOUT_S = 2.0
LARGE = 32 << 20  # past what loopback's socket buffers hold, so the server's own buffer fills


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echoes the body on POST /echo; the other paths answer in the ways the cases need."""
    assert scope["type"] == "http"
    path = scope["path"]
    if path == "/echo":
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(b"content-type", b"application/octet-stream"),
                   (b"content-length", b"%d" % len(body))]  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif path == "/stream":  # no length given: the answer is chunked
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for piece in (b"one", b"two", b""):
            await send({"type": "http.response.body", "body": piece, "more_body": bool(piece)})
    elif path == "/large":  # LARGE bytes, written at once
        headers = [(b"content-length", b"%d" % LARGE)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": bytes(LARGE)})
    elif path == "/fails":
        raise RuntimeError("the application failed")
    elif path == "/silent":
        return  # returns without answering
    elif path == "/scope":
        text = f"{scope['method']} {scope['path']} {scope['query_string'].decode()} "
        text += f"{scope['http_version']} {scope['scheme']} {scope['client'][0]}"
        body = text.encode()
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = data_plane_server(
        app, header_timeout_s=30, body_timeout_s=30, send_timeout_s=SEND_TIMEOUT_S,
        graceful_shutdown_s=1,
    )  # fmt: skip
    server.config.timeout_keep_alive = KEEP_ALIVE_S
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve([sock]),))
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)
    loop.close()


def exchange(port: int, data: bytes) -> bytes:
    """What the server answers to ``data`` until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(data)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
        return answer


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path.encode(), len(body), extra, body
    )  # fmt: skip


def test_a_body_is_read_and_answered_with_its_length(port: int) -> None:
    answer = exchange(port, post("/echo", b"hello", b"Connection: close\r\n"))
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"content-length: 5" in head and b"connection: close" in head and b"date: " in head
    assert body == b"hello"


def test_a_chunked_request_body_arrives_whole(port: int) -> None:
    request = (b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")  # fmt: skip
    assert exchange(port, request).endswith(b"\r\n\r\nabcdefg")


def test_expect_100_continue_is_answered_before_the_body_is_sent(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
                       b"Expect: 100-continue\r\nConnection: close\r\n\r\n")  # fmt: skip
        assert client.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.sendall(b"body")
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nbody")


def test_an_answer_before_100_continue_closes_the_connection_after_it(port: int) -> None:
    """The client waits for ``100 Continue`` before it sends the body; answered without one, it
    may send the body or never send it, so the connection cannot be read on: it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"POST /scope HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n"
                       b"Expect: 100-continue\r\n\r\n")  # fmt: skip
        answer = b""
        while chunk := client.recv(65536):  # NOTE: a kept connection would time out here
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close\r\n" in answer
    assert b"100 Continue" not in answer


def test_a_body_sent_without_waiting_for_100_continue_keeps_the_connection(port: int) -> None:
    """Part of the body came without waiting: the client sends the rest whatever the answer, so
    the connection reads on (dropping it) and serves the next request."""
    request = post("/scope", b"body", b"Expect: 100-continue\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        reader = client.makefile("rb")
        for first, rest in ((request[:-2], request[-2:]), (request, b"")):
            client.sendall(first)  # NOTE: /scope answers without reading the body
            head = []
            while (line := reader.readline()) not in (b"\r\n", b""):
                head.append(line)
            assert head[0] == b"HTTP/1.1 200 OK\r\n" and b"connection: close\r\n" not in head
            length = next(int(line[15:]) for line in head if line.startswith(b"content-length"))
            assert reader.read(length).startswith(b"POST /scope")
            client.sendall(rest)


def test_an_answer_without_a_length_is_chunked(port: int) -> None:
    answer = exchange(port, b"GET /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


def test_head_gets_the_headers_and_no_body(port: int) -> None:
    answer = exchange(port, b"HEAD /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n")
    assert b"transfer-encoding" not in answer


def test_an_application_that_fails_or_never_answers_gets_500(port: int) -> None:
    for path in (b"/fails", b"/silent"):
        answer = exchange(port, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path)
        assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
        assert answer.endswith(b"Internal Server Error") and b"connection: close" in answer


def test_the_scope_carries_what_asgi_says(port: int) -> None:
    answer = exchange(port, b"GET /sc%6Fpe?a=1 HTTP/1.0\r\nHost: t\r\n\r\n")  # 1.0: closes
    assert answer.endswith(b"GET /scope a=1 1.0 http 127.0.0.1")


def test_pipelined_requests_are_answered_in_order_on_one_connection(port: int) -> None:
    requests = post("/echo", b"first") + post("/echo", b"second")
    requests += post("/echo", b"third", b"Connection: close\r\n")
    answer = exchange(port, requests)
    bodies = [part.split(b"\r\n\r\n", 1)[1][:6] for part in answer.split(b"HTTP/1.1 ")[1:]]
    assert bodies == [b"first", b"second", b"third"]


def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        # Timed from before the request: the server's idle wait begins after its answer, so
        # however long this client takes to read it, the close comes KEEP_ALIVE_S after this
        # at the earliest (less a timer's tolerance).
        began = time.monotonic()
        client.sendall(post("/echo", b"x"))
        answer = b""
        while not answer.endswith(b"\r\n\r\nx"):  # NOTE: ``send`` writes head and body apart
            chunk = client.recv(65536)
            assert chunk, answer
            answer += chunk
        assert client.recv(1) == b""  # the server closed it
        waited_s = time.monotonic() - began
    assert KEEP_ALIVE_S - 0.05 <= waited_s < KEEP_ALIVE_S + 5


def test_a_malformed_request_gets_400_and_a_close(port: int) -> None:
    answer = exchange(port, b"GET / HTTP/1.1\r\nHo st: t\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"Invalid HTTP request received.")


def test_headers_above_the_limit_get_431_and_a_close(port: int) -> None:
    big = b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 1) + b"\r\n"
    answer = exchange(port, b"GET /scope HTTP/1.1\r\nHost: t\r\n" + big + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"request headers exceed" in answer


def test_headers_just_under_the_limit_are_served(port: int) -> None:
    big = b"X-Big: " + b"a" * (MAX_HEADER_BYTES - 200) + b"\r\n"
    answer = exchange(
        port, b"GET /scope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + big + b"\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")


def test_an_upgrade_request_is_answered_as_plain_http_then_closed(port: int) -> None:
    request = (b"GET /scope HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
               b"Upgrade: websocket\r\n\r\n")  # fmt: skip
    answer = exchange(port, request)  # NOTE: returns only once the server closes
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" in answer


def test_a_client_gone_mid_body_leaves_the_server_serving(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\npart")
    answer = exchange(port, post("/echo", b"after", b"Connection: close\r\n"))
    assert answer.endswith(b"\r\n\r\nafter")


def socket_error_within(sock: socket.socket, limit_s: float) -> int:
    """Wait, reading nothing, until ``sock`` has an error (the server reset it) or ``limit_s``
    has passed; the error, 0 if none came."""
    error, deadline = 0, time.monotonic() + limit_s
    while not error and time.monotonic() < deadline:
        time.sleep(0.05)
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return error


def test_a_client_that_reads_none_of_its_answer_is_cut_off_after_the_send_timeout(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The answer fills the server's write buffer and the client takes nothing: the connection
    is aborted (a reset, which drops the buffer), not kept for as long as the client likes."""
    caplog.set_level(logging.WARNING, "serving.protocol")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        began = time.monotonic()
        client.sendall(b"GET /large HTTP/1.1\r\nHost: t\r\n\r\n")
        error = socket_error_within(client, 30)
        waited_s = time.monotonic() - began
    assert error == errno.ECONNRESET, f"the connection was not reset within {waited_s:.1f} s"
    assert waited_s >= SEND_TIMEOUT_S - 0.05
    assert "took none of its answers for 2 s" in caplog.text


def test_a_client_reading_slowly_keeps_its_connection_past_the_send_timeout(port: int) -> None:
    """Only a client that takes nothing is cut off: one taking a little at a time, for several
    times the timeout in all, gets the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        began = time.monotonic()
        client.sendall(b"GET /large HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        received = 0
        while chunk := client.recv(256 << 10):
            received += len(chunk)
            time.sleep(0.02)  # about 12 MiB/s at most: several seconds for the answer
        took_s = time.monotonic() - began
    assert received > LARGE  # the head and the whole body
    assert took_s > SEND_TIMEOUT_S


def test_uvicorn_uses_this_protocol() -> None:
    server = data_plane_server(
        app, header_timeout_s=7, body_timeout_s=9, send_timeout_s=11, graceful_shutdown_s=1
    )
    server.config.load()
    protocol = server.config.http_protocol_class
    assert isinstance(server, uvicorn.Server)
    assert (protocol.header_timeout_s, protocol.body_timeout_s, protocol.send_timeout_s) == (
        7, 9, 11,
    )  # fmt: skip
    assert protocol.__mro__[1].__name__ == "DataPlaneConnection"
