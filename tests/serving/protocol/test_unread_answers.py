"""A client that takes none of its answer for ``--send-timeout-secs`` is cut off, on
every listener that has the answer's bytes in hand: its HTTP/1.1 connection is reset, its gRPC
stream reset (the rest of its connection goes on), and what waited for it is dropped; one that
reads, however slowly, keeps them (nginx's ``send_timeout``; ``serving/protocol/write_stall.py``,
and h2corn's own stall limits). Before, a 48 MiB answer whose client read nothing for 75 s was
still held whole, past the keep-alive timeout. The connection protocol's own cases are in
``test_http_connection.py``."""

from __future__ import annotations

import argparse
import errno
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from h2.settings import SettingCodes
from tritonclient.grpc import service_pb2

from serving.cli import add_arguments, settings_from_args
from serving.main import ServingProcess
from serving.settings import ServingSettings, settings_from_env
from tests.serving.harness import HTTP_WORKERS
from tests.serving.protocol.h2_client import Answer, RawGrpc
from tests.serving.protocol.test_http_connection import socket_error_within
from tests.serving.protocol.test_request_bytes_budget import INFER, MiB, _wait_for
from tests.serving.protocol.test_request_bytes_outputs import (
    UNREAD_ANSWER,
    _expand_body,
    _expand_message,
    _serve_expand,
)

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

TIMEOUT_S = 2.0
WIDEST_WINDOW = (1 << 31) - 1  # HTTP/2's largest
WORKERS = {"in-process": 0, "frontends": 2}


def test_the_send_timeout_comes_from_its_flag_or_its_variable() -> None:
    assert ServingSettings(model_repository="/models").send_timeout_s == 60
    with pytest.raises(ValueError, match="--send-timeout-secs: must be positive"):
        ServingSettings(model_repository="/models", send_timeout_s=0)
    env = {"SERVING_MODEL_REPOSITORY": "/models", "SERVING_SEND_TIMEOUT_SECS": "2.5"}
    assert settings_from_env(env).send_timeout_s == 2.5
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(["--model-repository", "/models", "--send-timeout-secs", "5"])
    assert settings_from_args(vars(options)).send_timeout_s == 5


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=tuple(WORKERS))
def http_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    yield from _serve_expand(
        tmp_path_factory.mktemp("expand"), http_workers=request.param,
        send_timeout_s=TIMEOUT_S,
    )  # fmt: skip


@pytest.fixture(
    params=[(transport, workers) for transport in ("h2corn", "h2") for workers in WORKERS],
    ids=lambda param: "-".join(param),
)
def grpc_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServingProcess]:
    transport, workers = request.param
    yield from _serve_expand(
        tmp_path, grpc_transport=transport, grpc_workers=WORKERS[workers],
        send_timeout_s=TIMEOUT_S,
    )  # fmt: skip


def test_an_http_client_that_reads_none_of_its_answer_is_reset(
    http_server: ServingProcess,
) -> None:
    budget = http_server.server.request_bytes if http_server.server else None
    host, port = http_server.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        error, waited_s = _ask_and_read_nothing(client)
    assert error == errno.ECONNRESET, f"the connection was not reset within {waited_s:.0f} s"
    assert waited_s >= TIMEOUT_S - 0.05
    assert budget is not None
    _wait_for(lambda: budget.held == 0, "the answer's bytes given back")


def _ask_and_read_nothing(client: socket.socket) -> tuple[int, float]:
    """Ask for a 48 MiB answer and read none of it: the socket's error once the server reset
    the connection (0 if it did not within fifteen times the timeout), and the time taken."""
    body = _expand_body(UNREAD_ANSWER)
    began = time.monotonic()
    client.sendall(b"POST /v2/models/expand/infer HTTP/1.1\r\nhost: t\r\n"
                   b"content-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
    error = socket_error_within(client, 15 * TIMEOUT_S)
    return error, time.monotonic() - began


def _read_slowly(raw: RawGrpc, sid: int, step: int, pause_s: float) -> Answer:
    """Read stream ``sid`` to its end, giving back at most ``step`` bytes of window every
    ``pause_s``."""
    answer = raw.answers.setdefault(sid, Answer())
    given = 0
    deadline = time.monotonic() + 120
    while not answer.finished and time.monotonic() < deadline:
        time.sleep(pause_s)
        while (data := raw._receive(time.monotonic() + 0.01)) is not None:  # all that came
            if not data:
                answer.closed = True
                return answer
            raw._take(data, acknowledge=False)
        owed = min(len(answer.data) - given, step)
        if owed > 0:
            raw.h2.acknowledge_received_data(owed, sid)
            raw.sock.sendall(raw.h2.data_to_send())
            given += owed
    return answer


def test_a_grpc_stream_whose_client_reads_none_of_its_answer_is_reset_alone(
    grpc_server: ServingProcess,
) -> None:
    """Past the client's window (HTTP/2's 64 KiB, never raised here) a 3 MiB answer waits: once
    the client has given no window for the timeout the stream is reset, and a call on the same
    connection is still answered."""
    host, port = grpc_server.grpc_url.rsplit(":", 1)
    with RawGrpc(host, int(port)) as raw:
        began = time.monotonic()
        sid = raw.open(INFER)
        raw.send(sid, _expand_message(3 * MiB), end=True)
        unread = raw.wait(sid, timeout_s=15 * TIMEOUT_S, acknowledge=False)
        waited_s = time.monotonic() - began
        assert unread.reset is not None and not unread.closed, unread
        assert waited_s >= TIMEOUT_S - 0.05
        assert len(unread.data) < MiB
        # What came on it is the connection's window still, as a client gives it back.
        raw.h2.acknowledge_received_data(len(unread.data), sid)

        small = raw.call(INFER, [_expand_message(16)], timeout_s=30)
    assert small.grpc_status == 0, small.trailers
    [message] = small.messages()
    assert service_pb2.ModelInferResponse.FromString(message).raw_output_contents[0] == bytes(16)
    server = grpc_server.server
    assert server is not None
    _wait_for(lambda: server.request_bytes.held == 0, "the answer's bytes given back")


def test_a_grpc_client_reading_its_answer_slowly_keeps_its_stream(
    grpc_server: ServingProcess,
) -> None:
    """32 KiB of window every 0.1 s: a 1 MiB answer takes longer than the timeout, and goes."""
    host, port = grpc_server.grpc_url.rsplit(":", 1)
    with RawGrpc(host, int(port)) as raw:
        began = time.monotonic()
        sid = raw.open(INFER)
        raw.send(sid, _expand_message(MiB), end=True)
        answer = _read_slowly(raw, sid, step=32 << 10, pause_s=0.1)
        took_s = time.monotonic() - began
    assert answer.grpc_status == 0 and answer.reset is None, answer.trailers
    [message] = answer.messages()
    assert service_pb2.ModelInferResponse.FromString(message).raw_output_contents[0] == bytes(MiB)
    assert took_s > TIMEOUT_S


@pytest.fixture(params=["h2corn", "h2"])
def in_process_grpc_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[ServingProcess]:
    yield from _serve_expand(tmp_path, grpc_transport=request.param, send_timeout_s=TIMEOUT_S)


def test_a_grpc_client_that_reads_nothing_from_its_socket_loses_its_connection(
    in_process_grpc_server: ServingProcess,
) -> None:
    """With its HTTP/2 windows opened wide, the client's 48 MiB answer waits in the server's
    socket buffers, not in its stream: the connection ends. The ``h2`` listener resets it (seen
    here without reading); h2corn closes it (``h2_timeout_write``), and what the
    kernel holds still comes first, so after waiting five times the timeout this client reads,
    and the connection ends before the answer does. Before, it got the whole answer after 30 s."""
    server = in_process_grpc_server
    host, port = server.grpc_url.rsplit(":", 1)
    with RawGrpc(host, int(port)) as raw:
        raw.h2.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: WIDEST_WINDOW})
        raw.h2.increment_flow_control_window(WIDEST_WINDOW - raw.h2.inbound_flow_control_window)
        sid = raw.open(INFER)
        raw.send(sid, _expand_message(UNREAD_ANSWER), end=True)
        error = socket_error_within(raw.sock, 5 * TIMEOUT_S)
        answer = raw.wait(sid, timeout_s=10)
    assert answer.closed and not answer.finished, answer.trailers
    assert len(answer.data) < UNREAD_ANSWER
    if server.settings.grpc_transport == "h2":
        assert error == errno.ECONNRESET
