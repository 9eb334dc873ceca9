"""Slow bodies: a client that sends its headers and then stalls in its body is answered 408 in
Triton's JSON error shape and disconnected once the body timeout passes, which gives its place
under the in-flight cap back; a body that keeps coming, however slowly in all, is served."""

from __future__ import annotations

import argparse
import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from repository import demo_models as dm
from serving.cli import add_arguments, settings_from_args
from serving.main import ServingProcess
from serving.settings import ServingSettings, settings_from_env
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, serving

pytestmark = pytest.mark.embedded

BODY_TIMEOUT_S = 3.0
TRICKLE_GAP_S = 0.2  # far inside the timeout, even on a loaded machine
WAIT_S = 60.0


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    # One place in flight: a stalled body visibly holds it until the timeout frees it.
    with serving(repo, http_body_timeout_s=BODY_TIMEOUT_S, max_in_flight_requests=1,
                 http_workers=request.param) as process:  # fmt: skip
        yield process


def infer_body(values: list[float]) -> bytes:
    inputs = [{"name": "INPUT0", "shape": [1, len(values)], "datatype": "FP32", "data": values}]
    return json.dumps({"inputs": inputs}).encode()


def head(body_length: int) -> bytes:
    return (
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % body_length
    )


def connect(server: ServingProcess) -> socket.socket:
    host, port = server.http_url.split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def infer_status(server: ServingProcess) -> int:
    body = infer_body([1.0, 2.0])
    with connect(server) as sock:
        sock.sendall(head(len(body)) + body)
        return int(sock.recv(4096).split(b" ", 2)[1])


def split_answer(answer: bytes) -> tuple[bytes, dict[str, str]]:
    status_and_headers, _, body = answer.partition(b"\r\n\r\n")
    return status_and_headers, json.loads(body)


def stalled_request(server: ServingProcess, body: bytes) -> tuple[socket.socket, float]:
    """A connection holding the only in-flight place with a body it stopped sending, and when
    it stopped. The stalled request and the probes race to the place (through front-ends, on
    different processes), so a stalled request that lost the race (answered 503) is sent
    again."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        stalled = connect(server)
        stalled.sendall(head(len(body)) + body[:10])  # then nothing more
        sent_s = time.monotonic()
        while time.monotonic() < deadline:
            if infer_status(server) == 503:
                return stalled, sent_s  # the stalled request holds the only place
            if select.select([stalled], [], [], 0)[0]:  # it was answered: it lost the race
                stalled.close()
                break
            time.sleep(0.05)
    raise AssertionError(f"no stalled request held the place within {WAIT_S} s")


def test_a_stalled_body_is_answered_408_and_its_in_flight_place_freed(
    server: ServingProcess,
) -> None:
    stalled, sent_s = stalled_request(server, infer_body([1.0] * 64))
    with stalled:
        answer = read_until_closed(stalled)
        waited_s = time.monotonic() - sent_s
    status_and_headers, error = split_answer(answer)
    assert status_and_headers.startswith(b"HTTP/1.1 408 ")
    assert b"content-type: application/json" in status_and_headers.lower()
    assert error == {"error": "request body was not received in time"}
    assert waited_s >= BODY_TIMEOUT_S * 0.9  # the timeout ended it, nothing earlier
    deadline = time.monotonic() + WAIT_S
    while (status := infer_status(server)) == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status == 200


def test_a_body_that_keeps_coming_is_served_past_the_timeout(server: ServingProcess) -> None:
    values = [float(v) for v in range(32)]
    body = infer_body(values)
    pieces = [body[i : i + 10] for i in range(0, len(body), 10)]
    with connect(server) as sock:
        sock.sendall(head(len(body)))
        started = time.monotonic()
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(TRICKLE_GAP_S)
        answer = read_until_closed_or_complete(sock)
    assert time.monotonic() - started > BODY_TIMEOUT_S  # longer in all than the timeout
    status_and_headers, response = split_answer(answer)
    assert status_and_headers.startswith(b"HTTP/1.1 200 ")
    output = np.array(response["outputs"][0]["data"], dtype=np.float32)  # type: ignore[index]
    assert output.tolist() == values


def test_a_later_requests_stalled_body_gets_its_own_whole_timeout(server: ServingProcess) -> None:
    """The body timer of a request that completed is left running, not cancelled; when it
    fires during a later request's body it must count from that body's last read, and still
    end it."""
    body = infer_body([1.0] * 8)
    with connect(server) as sock:
        sock.sendall(head(len(body)) + body)
        status_and_headers, _ = split_answer(read_until_closed_or_complete(sock))
        assert status_and_headers.startswith(b"HTTP/1.1 200 ")
        time.sleep(BODY_TIMEOUT_S * 0.6)  # the first request's timer now fires soon
        sock.sendall(head(len(body)) + body[:5])  # and this body never completes
        sent_s = time.monotonic()
        answer = read_until_closed(sock)
        waited_s = time.monotonic() - sent_s
    assert split_answer(answer)[0].startswith(b"HTTP/1.1 408 ")
    assert waited_s >= BODY_TIMEOUT_S * 0.9  # not ended when the first request's timer fired
    assert waited_s < BODY_TIMEOUT_S + WAIT_S


def read_until_closed_or_complete(sock: socket.socket) -> bytes:
    """One keep-alive answer: headers, then as many bytes as its Content-Length says."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(4096)
    headers, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in headers.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return headers + b"\r\n\r\n" + body


def test_body_timeout_comes_from_its_flag_or_variable_and_must_be_positive() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = vars(parser.parse_args(["--http-body-timeout-secs", "7.5"]))
    assert settings_from_args(options).http_body_timeout_s == 7.5
    from_env = settings_from_env({"SERVING_HTTP_BODY_TIMEOUT_SECS": "12"})
    assert from_env.http_body_timeout_s == 12.0
    assert ServingSettings().http_body_timeout_s == 60.0
    with pytest.raises(ValueError, match="--http-body-timeout-secs: must be positive"):
        ServingSettings(http_body_timeout_s=0)
