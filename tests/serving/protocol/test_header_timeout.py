"""Slowloris: a connection that sends nothing, or dribbles its request headers, is answered 408
and closed once the header deadline passes; a client that finishes its headers in time is served,
however slowly its connection then idles between requests."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, serving

pytestmark = pytest.mark.embedded

HEADER_TIMEOUT_S = 1.0
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    with serving(
        repo, http_header_timeout_s=HEADER_TIMEOUT_S, http_workers=request.param
    ) as process:
        yield process


def connect(server: ServingProcess) -> socket.socket:
    host, port = server.http_url.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    started, received = time.monotonic(), b""
    while chunk := sock.recv(4096):
        received += chunk
    return received, time.monotonic() - started


def test_a_connection_that_sends_nothing_is_closed_with_408(server: ServingProcess) -> None:
    with connect(server) as sock:
        answer, waited_s = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request headers were not received in time" in answer
    assert waited_s < HEADER_TIMEOUT_S + 5


def test_headers_sent_a_line_at_a_time_are_cut_off_at_the_deadline(
    server: ServingProcess,
) -> None:
    # Timed from before the connection: the server's deadline starts once it has accepted it.
    started, received, ended = time.monotonic(), b"", False
    with connect(server) as sock:
        sock.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.2)
        while not ended and time.monotonic() - started < HEADER_TIMEOUT_S + 5:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                ended = True  # closed with our unread header lines: the kernel resets
            else:
                received += chunk
                ended = chunk == b""
        waited_s = time.monotonic() - started
    assert ended
    # The deadline ended it, not the first line (less a timer's tolerance).
    assert waited_s >= HEADER_TIMEOUT_S - 0.05
    assert received == b"" or received.startswith(b"HTTP/1.1 408 ")


def test_a_keep_alive_connection_is_served_across_the_deadline(server: ServingProcess) -> None:
    with connect(server) as sock:
        for _ in range(2):
            sock.sendall(LIVE)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
            time.sleep(HEADER_TIMEOUT_S * 1.5)  # idle between requests is keep-alive's business


def test_a_later_requests_headers_get_the_whole_deadline_from_their_own_start(
    server: ServingProcess,
) -> None:
    """The timer set when the connection opened is not cancelled by a request that completes;
    when it fires during a later request's headers it must give that request what is left of
    its own deadline, not cut it off early, and still cut it off in the end."""
    with connect(server) as sock:
        sock.sendall(LIVE)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        time.sleep(HEADER_TIMEOUT_S * 0.6)  # the connection's first timer is now 0.4 s away
        started = time.monotonic()
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")  # never finished
        answer, _ = read_until_closed(sock)
        waited_s = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert waited_s >= HEADER_TIMEOUT_S * 0.9  # not cut off when the first timer fired
    assert waited_s < HEADER_TIMEOUT_S + 5
