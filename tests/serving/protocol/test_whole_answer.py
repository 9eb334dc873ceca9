"""Infer answers written whole: one write with the status line, headers and body, and every case
where the exchange's own ``send`` must take the answer instead; and the exchange's other
shortcuts on the infer path: a body taken whole without ``receive``, and the exchange standing as
its request's disconnect watch."""

from __future__ import annotations

import asyncio
import json
import socket
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from uvicorn.server import ServerState

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.protocol.http.app import HttpApp
from serving.protocol.http.connection import DataPlaneConnection
from serving.protocol.http.disconnect import ClientDisconnected
from serving.protocol.http.exchange import Exchange
from serving.protocol.http.whole_answer import WHOLE_ANSWER_EXTENSION
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, serving

pytestmark = pytest.mark.embedded

BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                               "data": [1, 2, 3, 4]}]}).encode()  # fmt: skip
BINARY_OUT_BODY = json.dumps({
    "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
}).encode()  # fmt: skip
DATE = (b"date", b"Wed, 02 Dec 2026 12:00:00 GMT")


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written to it (the socket's side is not under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.paused_reading = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused_reading = True

    def resume_reading(self) -> None:
        self.paused_reading = False

    def get_write_buffer_size(self) -> int:
        return sum(map(len, self.writes))

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _exchange(
    loop: asyncio.AbstractEventLoop, *, keep_alive: bool = True, method: str = "POST"
) -> tuple[Exchange, DataPlaneConnection, RecordingTransport]:
    """An exchange on a real connection over a recording transport; nothing runs on ``loop``."""
    state = ServerState()
    state.default_headers = [DATE]
    config = types.SimpleNamespace(loaded_app=None, timeout_keep_alive=5)
    connection = DataPlaneConnection(config, state, _loop=loop)
    transport = RecordingTransport()
    connection.connection_made(transport)
    scope = {"method": method, "type": "http"}
    exchange = Exchange(scope, connection, keep_alive=keep_alive, expect_100_continue=False)
    return exchange, connection, transport


def test_the_whole_answer_is_one_write_and_completes_the_exchange(
    loop: asyncio.AbstractEventLoop,
) -> None:
    exchange, connection, transport = _exchange(loop)
    assert exchange.write_whole(200, [(b"content-type", b"application/json")], b'{"a":1}')
    assert transport.writes == [
        b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 12:00:00 GMT\r\n"
        b"content-type: application/json\r\ncontent-length: 7\r\n\r\n"
        b'{"a":1}'
    ]
    assert exchange.response_started and exchange.response_complete
    assert connection.server_state.total_requests == 1 and not transport.closed


def test_a_connection_that_does_not_stay_open_says_so_and_closes(
    loop: asyncio.AbstractEventLoop,
) -> None:
    exchange, connection, transport = _exchange(loop, keep_alive=False)
    assert exchange.write_whole(200, [], b"x")
    assert b"connection: close\r\n" in transport.writes[0]
    assert transport.closed and connection.server_state.total_requests == 1


def test_a_relayed_content_length_is_replaced_and_connection_close_is_honoured(
    loop: asyncio.AbstractEventLoop,
) -> None:
    exchange, connection, transport = _exchange(loop)
    relayed = [(b"content-length", b"99"), (b"connection", b"close")]
    assert exchange.write_whole(413, relayed, b"too big")
    (written,) = transport.writes
    assert written.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert b"content-length: 7\r\n" in written and b"content-length: 99" not in written
    assert written.count(b"connection: close") == 1
    assert not exchange.keep_alive and transport.closed
    assert connection.server_state.total_requests == 1


@pytest.mark.parametrize(
    "state",
    ["started", "disconnected", "write buffer full", "HEAD", "204", "chunked"],
)
def test_it_declines_where_send_must_take_the_answer(
    loop: asyncio.AbstractEventLoop, state: str
) -> None:
    exchange, connection, transport = _exchange(loop, method="HEAD" if state == "HEAD" else "POST")
    status, headers = 200, []
    if state == "started":
        exchange.response_started = True
    elif state == "disconnected":
        exchange.lost()
    elif state == "write buffer full":
        connection.pause_writing()
    elif state == "204":
        status = 204
    elif state == "chunked":
        headers = [(b"transfer-encoding", b"chunked")]
    assert not exchange.write_whole(status, headers, b"x")
    assert transport.writes == [] and not exchange.response_complete
    assert connection.server_state.total_requests == 0


def test_a_header_value_with_a_line_break_is_left_to_send_which_refuses_it(
    loop: asyncio.AbstractEventLoop,
) -> None:
    exchange, _, transport = _exchange(loop)
    headers = [(b"x-a", b"1\r\nx-b: 2")]
    assert not exchange.write_whole(200, headers, b"x")
    assert transport.writes == [] and not exchange.response_started
    start = {"type": "http.response.start", "status": 200, "headers": headers}
    with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
        loop.run_until_complete(exchange.send(start))
    assert transport.writes == []


def test_a_body_that_arrived_whole_is_taken_once_and_receive_then_waits_for_the_end(
    loop: asyncio.AbstractEventLoop,
) -> None:
    exchange, _, _ = _exchange(loop)
    assert exchange.take_whole_body() is None  # nothing has arrived
    exchange.add_body(b"abc")
    assert exchange.take_whole_body() is None  # more is coming
    exchange.add_body(b"def")
    exchange.end_body()
    assert exchange.take_whole_body() == b"abcdef"
    assert exchange.take_whole_body() is None  # taken already
    later = loop.create_task(exchange.receive())
    loop.run_until_complete(asyncio.sleep(0))
    assert not later.done()  # as after the last body message: only the end is left to tell
    assert exchange.write_whole(200, [], b"ok")
    assert loop.run_until_complete(later) == {"type": "http.disconnect"}


@pytest.mark.parametrize("state", ["100-continue", "disconnected", "answered"])
def test_a_body_is_not_taken_whole_where_receive_has_more_to_do(
    loop: asyncio.AbstractEventLoop, state: str
) -> None:
    exchange, _, transport = _exchange(loop)
    exchange.add_body(b"abc")
    exchange.end_body()
    if state == "100-continue":
        exchange.waiting_for_100_continue = True  # ``receive`` sends 100 Continue first
    elif state == "disconnected":
        exchange.lost()
    else:
        assert exchange.write_whole(200, [], b"ok")
    assert exchange.take_whole_body() is None
    message = loop.run_until_complete(exchange.receive())
    if state == "100-continue":
        assert transport.writes[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
        assert message == {"type": "http.request", "body": b"abc", "more_body": False}
    else:
        assert message == {"type": "http.disconnect"}


def test_a_body_taken_whole_over_the_limit_is_413(loop: asyncio.AbstractEventLoop) -> None:
    exchange, _, transport = _exchange(loop)
    exchange.scope.update(path="/v2/models/m/infer", raw_path=b"/v2/models/m/infer", headers=[],
                          extensions={WHOLE_ANSWER_EXTENSION: exchange})  # fmt: skip
    exchange.add_body(b"x" * 9)  # chunked: no content-length announced it
    exchange.end_body()
    app = HttpApp(None, max_request_bytes=8)  # type: ignore[arg-type]  # refused before it
    loop.run_until_complete(exchange.run(app))
    written = b"".join(transport.writes)
    assert written.startswith(b"HTTP/1.1 413 ")
    assert b"request body of 9 bytes exceeds the maximum input size of 8 bytes" in written
    assert transport.closed  # NOTE: a refused body closes the connection, as before it was read


def test_the_exchange_is_its_requests_disconnect_watch(loop: asyncio.AbstractEventLoop) -> None:
    exchange, _, _ = _exchange(loop)
    work = loop.create_future()

    async def app() -> None:
        await exchange.until_lost(work)

    task = loop.create_task(app())
    exchange.task = task  # as the connection sets it for the request's task
    loop.run_until_complete(asyncio.sleep(0))
    exchange.lost()
    with pytest.raises(ClientDisconnected):
        loop.run_until_complete(task)
    assert work.cancelled()  # the work awaited for the gone client is cancelled with it


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServingProcess]:
    """In-process, and behind front-ends, which write the relayed answers whole as well."""
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    with serving(repo, http_workers=request.param) as process:
        yield process


def _request(version: bytes = b"1.1", extra: bytes = b"", body: bytes = BODY) -> bytes:
    return (
        b"POST /v2/models/identity/infer HTTP/" + version + b"\r\nHost: test\r\n" + extra
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )  # fmt: skip


Answer = tuple[bytes, dict[bytes, bytes], bytes]


def _read_answers(connection: socket.socket, count: int) -> list[Answer]:
    """``count`` answers read off the socket, each as (status line, headers, body)."""
    data = b""
    answers = []
    while len(answers) < count:
        head, separator, rest = data.partition(b"\r\n\r\n")
        if separator:
            status, *lines = head.split(b"\r\n")
            pairs = [tuple(line.split(b": ", 1)) for line in lines]
            headers = dict(pairs)
            headers[b"(last)"] = pairs[-1][0]
            length = int(headers[b"content-length"])
            if len(rest) >= length:
                answers.append((status, headers, rest[:length]))
                data = rest[length:]
                continue
        chunk = connection.recv(65536)
        assert chunk, f"connection closed after {len(answers)} answers"
        data += chunk
    assert data == b""
    return answers


def test_pipelined_requests_on_one_connection_are_answered_whole_and_in_order(
    server: ServingProcess,
) -> None:
    with socket.create_connection(("127.0.0.1", server.ports.http), timeout=30) as connection:
        connection.sendall(_request(body=BINARY_OUT_BODY) * 3)
        answers = _read_answers(connection, 3)
        connection.sendall(_request(body=BINARY_OUT_BODY))  # the connection stays open for more
        answers += _read_answers(connection, 1)
    for status, headers, body in answers:
        assert status == b"HTTP/1.1 200 OK" and b"date" in headers
        assert headers[b"content-type"] == b"application/octet-stream"
        json_length = int(headers[b"inference-header-content-length"])
        header = json.loads(body[:json_length])
        assert header["outputs"][0]["parameters"]["binary_data_size"] == 16
        assert np.frombuffer(body[json_length:], np.float32).tolist() == [1, 2, 3, 4]
        # ``send`` writes the headers in the app's order, which puts
        # inference-header-content-length after content-length; ``write_whole`` always writes
        # content-length last: so this answer was written whole.
        assert headers[b"(last)"] == b"content-length"


@pytest.mark.parametrize(("version", "extra"), [(b"1.0", b""), (b"1.1", b"Connection: close\r\n")])
def test_a_client_that_asks_for_no_keep_alive_gets_its_answer_then_the_close(
    server: ServingProcess, version: bytes, extra: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", server.ports.http), timeout=30) as connection:
        connection.sendall(_request(version, extra))
        ((status, headers, body),) = _read_answers(connection, 1)
        assert connection.recv(1) == b""  # closed by the server
    assert status.endswith(b"200 OK") and headers[b"connection"] == b"close"
    assert json.loads(body)["outputs"][0]["data"] == [1, 2, 3, 4]


def test_binary_and_large_answers_arrive_intact(server: ServingProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for length in (4, 64 * 1024):  # one whole write, then over the join limit: ``send``
            data = np.arange(length, dtype=np.float32).reshape(1, length)
            tensor = httpclient.InferInput("INPUT0", [1, length], "FP32")
            tensor.set_data_from_numpy(data, binary_data=True)
            wanted = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
            result = client.infer("identity", [tensor], outputs=[wanted])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    finally:
        client.close()
