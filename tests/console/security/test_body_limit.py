"""The request-body cap in front of Django: over-long bodies are answered 413 before the app
reads them (declared or chunked), and the upload routes keep their own larger caps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from console.security.body_limit import RequestBodyLimit, RouteLimit

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 1024
UPLOAD_CHUNK_LIMIT = 4096


class BodyReader:
    """A real ASGI app that reads the whole body (as Django does) and answers its length."""

    def __init__(self) -> None:
        self.called = False
        self.saw_disconnect = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.called = True
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.saw_disconnect = True
                return
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})


def drive(
    app: Any, *, path: str, chunks: list[bytes], content_length: int | None, method: str = "POST"
) -> tuple[int, bytes]:
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    incoming = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def limited(app: BodyReader) -> RequestBodyLimit:
    upload = RouteLimit("PUT", re.compile(r"^/uploads/"), 4 * LIMIT)
    return RequestBodyLimit(app, default_max_bytes=LIMIT, routes=[upload])


def test_a_declared_length_over_the_limit_is_refused_before_the_app_runs() -> None:
    app = BodyReader()
    status, body = drive(limited(app), path="/login/", chunks=[b""], content_length=LIMIT + 1)
    assert status == 413 and not app.called
    error = orjson.loads(body)
    assert error["code"] == "request_too_large" and error["extra"] == {"max_bytes": LIMIT}


def test_a_chunked_body_is_cut_off_once_it_passes_the_limit() -> None:
    app = BodyReader()
    chunks = [b"x" * 600, b"x" * 600, b"x" * 600]
    status, body = drive(limited(app), path="/api/models/", chunks=chunks, content_length=None)
    assert status == 413 and orjson.loads(body)["code"] == "request_too_large"
    assert app.saw_disconnect  # the app stopped reading at the second chunk


def test_bodies_within_the_limit_reach_the_app_whole() -> None:
    status, body = drive(limited(BodyReader()), path="/x/", chunks=[b"x" * 600, b"x" * 424],
                         content_length=None)  # fmt: skip
    assert (status, body) == (200, b"1024")


def test_a_route_with_its_own_limit_accepts_more_for_its_method_only() -> None:
    app = limited(BodyReader())
    assert drive(app, path="/uploads/s/", chunks=[b"x" * 3000], content_length=3000,
                 method="PUT") == (200, b"3000")  # fmt: skip
    assert drive(app, path="/uploads/s/", chunks=[b"x" * 3000], content_length=3000)[0] == 413


# The real console under uvicorn, as ``runconsole`` serves it.


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    env = dict(
        os.environ,
        PORTICO_MAX_REQUEST_BYTES=str(LIMIT),
        PORTICO_UPLOAD_CHUNK_MAX_BYTES=str(UPLOAD_CHUNK_LIMIT),
    )
    log = (tmp_path_factory.mktemp("console") / "console.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runconsole", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/login/", timeout=2).status_code == 200:
                break
        assert process.poll() is None and time.monotonic() < deadline, "console did not start"
        time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=30)
    log.close()


def _raw_request(url: str, head: str, body_parts: list[bytes]) -> bytes:
    """Send a request by hand (httpx would not send a body after a 413) and read the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())
        with contextlib.suppress(OSError):  # the server may close while we still send
            for part in body_parts:
                sock.sendall(part)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer:
                break
        return answer


def test_the_console_refuses_a_large_declared_body_without_reading_it(console_url: str) -> None:
    head = (
        "POST /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {1024**3}\r\n\r\n"
    )
    answer = _raw_request(console_url, head, [])  # not one body byte sent
    assert answer.startswith(b"HTTP/1.1 413")


def test_the_console_cuts_off_a_chunked_body(console_url: str) -> None:
    head = "POST /api/models/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    answer = _raw_request(console_url, head, [chunk, chunk, b"0\r\n\r\n"])
    assert answer.startswith(b"HTTP/1.1 413")


def test_an_upload_chunk_keeps_its_own_larger_cap(console_url: str) -> None:
    session = "0" * 32
    within = httpx.put(f"{console_url}/uploads/sessions/{session}/", content=b"x" * 3000)
    # Past the body cap and on to Django (its id header), whose CSRF check refuses this client.
    assert within.status_code == 403 and "x-request-id" in within.headers
    over = httpx.put(f"{console_url}/uploads/sessions/{session}/", content=b"x" * 5000)
    assert over.status_code == 413
    assert httpx.post(f"{console_url}/login/", content=b"x" * 3000).status_code == 413
