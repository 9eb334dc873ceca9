"""The replica's budget of request bytes being served (``--max-in-flight-request-bytes``): past it
an inference request gets HTTP 503 with Retry-After or gRPC UNAVAILABLE (in-band on a stream)
while smaller ones and the held ones go on, one budget for both protocols, in-process and behind
front-ends; its gauges and refusal counter on the metrics port; the settings it refuses."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import gzip
import http.client
import json
import queue
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from h2 import events as h2_events
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.core.request_bytes import RequestBytesBudget
from serving.main import ServingProcess
from serving.protocol.grpc import http2_wire as wire
from serving.protocol.grpc.arriving import ArrivingMessages
from serving.settings import ServingSettings, settings_from_env
from tests.serving.harness import HTTP_WORKERS, identity_input, serving
from tests.serving.protocol.h2_client import Answer, RawGrpc, grpc_message
from tests.serving.protocol.test_admission import serve_gated

pytestmark = pytest.mark.embedded

MiB = 1024 * 1024
MAX_REQUEST_BYTES = 4 * MiB
BUDGET = 8 * MiB
LARGE = 3 * MiB // 4  # FP32 elements of a 3 MiB tensor: two fit the budget, a third does not
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=("in-process", "frontends"))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, gate: Path
) -> Iterator[ServingProcess]:
    yield from serve_gated(request.param, tmp_path_factory, gate,
                           max_request_bytes=MAX_REQUEST_BYTES,
                           max_in_flight_request_bytes=BUDGET)  # fmt: skip


def test_requests_past_the_budget_are_refused_until_the_held_ones_are_answered(
    server: ServingProcess, gate: Path
) -> None:
    assert server.server is not None
    budget = server.server.request_bytes
    gated = server.server.models["gated"].versions[1]
    held_x = np.arange(LARGE, dtype=np.float32) + 1  # nonzero: the gated model holds it
    large = np.ones((1, LARGE), dtype=np.float32)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        held = [pool.submit(_infer_http, server, "gated", held_x) for _ in range(2)]
        try:  # NOTE: the gate opens whatever fails, so the held requests end at once
            _wait_for(lambda: gated.in_flight == 2, "two held requests")
            assert 6 * MiB < budget.held < 6 * MiB + 4096  # two bodies: 3 MiB each and a header

            # Refused from its declared length: the body is dropped as it comes, and the
            # connection goes on.
            status, headers, answer = _post(server, large)
            assert status == 503 and headers.get("retry-after") == "1", answer[:200]
            assert "connection" not in headers
            assert "overloaded" in answer and f"past {BUDGET} bytes" in answer
            # A compressed body is counted as it is once decompressed.
            status, headers, answer = _post(server, large, gzipped=True)
            assert status == 503 and headers.get("retry-after") == "1", answer[:200]
            assert "connection" not in headers and "overloaded" in answer
            # A client that waits for ``100 Continue`` (curl does, for large bodies) is refused
            # before it sends anything, and the connection closes: it may never send the body.
            # Behind a front-end the front-end asks for the body at once, to relay it.
            continued, status, fields, closed = _post_expecting_continue(server, large)
            assert status.startswith(b"HTTP/1.1 503 ") and fields[b"retry-after"] == b"1"
            if not server.settings.http_workers:
                assert not continued and fields[b"connection"] == b"close" and closed
            small = np.ones((1, 4), dtype=np.float32)
            np.testing.assert_array_equal(_infer_http(server, "identity", small), small)

            status, headers, answer = _generate(server, [1.0] * 600_000)  # 3 MB of JSON
            assert status == 503 and headers.get("retry-after") == "1", answer[:200]
            assert _generate(server, [2.0, 3.0])[0] == 200

            with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
                with pytest.raises(InferenceServerException, match="overloaded") as info:
                    grpc.infer("identity", [_grpc_input(large)])
                assert info.value.status() == "StatusCode.UNAVAILABLE"
                # A BYTES tensor counts its elements' bytes, not the references its array holds.
                text = np.array([[b"x" * (5 * MiB // 2)]], dtype=np.object_)
                with pytest.raises(InferenceServerException, match="overloaded"):
                    grpc.infer("identity_bytes", [_grpc_input(text, "BYTES")])
                np.testing.assert_array_equal(
                    grpc.infer("identity", [_grpc_input(small)]).as_numpy("OUTPUT0"), small
                )
                _assert_a_stream_refuses_in_band(grpc, large, small)

            metrics = _metrics(server)
            assert metrics["portico_request_bytes_refused_total"] == 7 == budget.refused
            assert metrics["portico_request_bytes_in_flight"] == budget.held
            assert metrics["portico_request_bytes_in_flight_limit"] == BUDGET
        finally:
            gate.touch()
        for future in held:
            np.testing.assert_array_equal(future.result(timeout=60), held_x)

    _wait_for(lambda: budget.held == 0, "the held requests' bytes to come back")
    np.testing.assert_array_equal(_infer_http(server, "identity", large), large)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        answer = grpc.infer("identity", [_grpc_input(large)]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(answer, large)
    assert budget.held == 0 and budget.refused == 7


@pytest.fixture(params=["h2corn", "h2"])
def identity_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServingProcess]:
    """``identity`` served in-process with the budget, its gRPC port on each transport that
    reads gRPC's framing itself."""
    dm.write_onnx_identity(tmp_path, "identity", dims=(-1,), max_batch_size=8)
    with serving(tmp_path, grpc_transport=request.param, max_request_bytes=MAX_REQUEST_BYTES,
                 max_in_flight_request_bytes=BUDGET) as server:  # fmt: skip
        yield server


def test_a_unary_grpc_message_counts_from_its_length_prefix(
    identity_server: ServingProcess,
) -> None:
    """A message arriving in pieces takes its declared length from the budget as soon as its
    prefix is in, so past the budget a unary call is refused before its client sends the rest;
    a stream's message is still counted once decoded (refused in-band, the stream going on)."""
    server = identity_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.grpc_url.rsplit(":", 1)
    declared = 3 * MiB  # two such messages fit the budget, a third does not
    start = grpc_message(bytes(declared))[: 16 * 1024]  # its prefix and the first bytes
    large, small = np.ones((1, LARGE), dtype=np.float32), np.ones((1, 4), dtype=np.float32)
    with RawGrpc(host, int(port)) as raw:
        arriving = [raw.open(INFER), raw.open(INFER)]
        for sid in arriving:
            raw.send(sid, start)
        _wait_for(lambda: budget.held == 2 * declared, "two arriving messages counted")

        refused = raw.open(INFER)
        raw.send(refused, start)  # and never the rest
        answer = raw.wait(refused)
        assert answer.grpc_status == 14, answer  # UNAVAILABLE
        assert "overloaded" in answer.grpc_message and f"past {BUDGET} bytes" in answer.grpc_message
        assert budget.held == 2 * declared
        # One budget for both protocols: HTTP sees the arriving messages too.
        assert _post(server, large)[0] == 503
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            with pytest.raises(InferenceServerException, match="overloaded") as info:
                grpc.infer("identity", [_grpc_input(large)])
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            _assert_a_stream_refuses_in_band(grpc, large, small)
            np.testing.assert_array_equal(
                grpc.infer("identity", [_grpc_input(small)]).as_numpy("OUTPUT0"), small
            )

        raw.reset(arriving[0])  # a call that ends gives its share back
        _wait_for(lambda: budget.held == declared, "the reset call's share back")
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            answered = grpc.infer("identity", [_grpc_input(large)]).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(answered, large)
    _wait_for(lambda: budget.held == 0, "the budget back once the client left")
    assert budget.refused == 4 == _metrics(server)["portico_request_bytes_refused_total"]


def test_an_arriving_messages_share_follows_its_length_prefix() -> None:
    budget = RequestBytesBudget(10)
    arriving = ArrivingMessages.of(budget)
    assert arriving is not None and ArrivingMessages.of(RequestBytesBudget(0)) is None
    assert arriving.recount(0, b"\0\0\0\0") == 0 == budget.held  # the prefix is not in yet
    share = arriving.recount(0, grpc_message(bytes(6))[:7])
    assert share == 6 == budget.held
    assert arriving.recount(share, grpc_message(bytes(6))[:9]) == 6 == budget.held  # the same
    share = arriving.recount(share, grpc_message(bytes(4))[:5])  # the next message, smaller
    assert share == 4 == budget.held
    budget.take(4)
    with pytest.raises(wire.WireError) as refused:  # 4 held by another, and 7 would pass 10
        arriving.recount(share, grpc_message(bytes(7))[:5])
    assert refused.value.code == wire.UNAVAILABLE and "past 10 bytes" in refused.value.message
    assert budget.held == 4 and budget.refused == 1  # its old share given back all the same
    assert arriving.recount(0, None) == 0


def test_the_budget_is_off_by_default_and_never_below_the_largest_request(tmp_path: Path) -> None:
    assert ServingSettings(model_repository=tmp_path).max_in_flight_request_bytes == 0
    message = "--max-in-flight-request-bytes: must be 0 .no budget. or at least --http-max-input"
    with pytest.raises(ValueError, match=message):
        ServingSettings(model_repository=tmp_path, max_request_bytes=MiB,
                        max_in_flight_request_bytes=MiB - 1)  # fmt: skip
    with pytest.raises(ValueError, match=message):
        ServingSettings(model_repository=tmp_path, max_in_flight_request_bytes=-1)
    env = {"SERVING_MODEL_REPOSITORY": str(tmp_path),
           "SERVING_MAX_IN_FLIGHT_REQUEST_BYTES": str(2 * 64 * MiB)}  # fmt: skip
    assert settings_from_env(env).max_in_flight_request_bytes == 128 * MiB

    from serving.cli import add_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = parser.parse_args(
        ["--model-repository", str(tmp_path), "--max-in-flight-request-bytes", str(256 * MiB)]
    )
    assert settings_from_args(vars(options)).max_in_flight_request_bytes == 256 * MiB


def _assert_a_stream_refuses_in_band(
    grpc: grpcclient.InferenceServerClient, large: np.ndarray[Any, Any], small: np.ndarray[Any, Any]
) -> None:
    """On a stream the refusal of ``large`` is one answer, and the stream goes on."""
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        grpc.async_stream_infer("identity", [_grpc_input(large)])
        result, error = answers.get(timeout=60)
        assert result is None and "overloaded" in str(error)
        grpc.async_stream_infer("identity", [_grpc_input(small)])
        result, error = answers.get(timeout=60)
        assert error is None
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), small)
    finally:
        grpc.stop_stream()


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _infer_http(server: ServingProcess, model: str, x: np.ndarray[Any, Any]) -> Any:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        return client.infer(model, [identity_input(x)]).as_numpy("OUTPUT0")


def _grpc_input(x: np.ndarray[Any, Any], datatype: str = "FP32") -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    return tensor


def _binary_header(x: np.ndarray[Any, Any]) -> bytes:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": list(x.shape),
              "parameters": {"binary_data_size": x.nbytes}}  # fmt: skip
    return json.dumps({"inputs": [tensor]}).encode()


def _post(
    server: ServingProcess, x: np.ndarray[Any, Any], *, gzipped: bool = False
) -> tuple[int, dict[str, str], str]:
    """A binary infer request for ``identity``, then a small one on the same connection (the
    same socket: a refusal leaves the connection usable)."""
    header = _binary_header(x)
    body = header + x.tobytes()
    sent = {"Inference-Header-Content-Length": str(len(header))}
    if gzipped:
        body, sent["Content-Encoding"] = gzip.compress(body), "gzip"
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/v2/models/identity/infer", body=body, headers=sent)
        response = connection.getresponse()
        answer = response.read().decode()
        headers = {key.lower(): value for key, value in response.getheaders()}
        first_socket = connection.sock
        small = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1],
                                        "data": [5.0]}]})  # fmt: skip
        connection.request("POST", "/v2/models/identity/infer", body=small.encode())
        again = connection.getresponse()
        assert again.status == 200, again.read()
        assert json.loads(again.read())["outputs"][0]["data"] == [5.0]
        assert connection.sock is first_socket
        return response.status, headers, answer
    finally:
        connection.close()


def _post_expecting_continue(
    server: ServingProcess, x: np.ndarray[Any, Any]
) -> tuple[bool, bytes, dict[bytes, bytes], bool]:
    """A binary infer request for ``identity`` sent as curl sends a large one: its headers with
    ``Expect: 100-continue``, its body only once the server asks for it. Whether it asked, the
    final answer's status line and headers (names lower-case), and whether the server closed
    the connection after the answer."""
    header = _binary_header(x)
    body = header + x.tobytes()
    host, port = server.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=60) as client:
        client.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\n"
                       b"Content-Length: %d\r\nInference-Header-Content-Length: %d\r\n"
                       b"Expect: 100-continue\r\n\r\n" % (len(body), len(header)))  # fmt: skip
        reader = client.makefile("rb")
        status = reader.readline()
        continued = status.startswith(b"HTTP/1.1 100 ")
        if continued:
            assert reader.readline() == b"\r\n"
            client.sendall(body)
            status = reader.readline()
        fields: dict[bytes, bytes] = {}
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.rstrip(b"\r\n").partition(b":")
            fields[name.lower()] = value.strip()
        assert b"overloaded" in reader.read(int(fields[b"content-length"]))
        closed = reader.read(1) == b""  # NOTE: a kept connection would wait for the idle timeout
    return continued, status, fields, closed


def _generate(server: ServingProcess, values: list[float]) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/identity/generate",
        data=json.dumps({"INPUT0": values}).encode(),
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers.items()), response.read().decode()
    except urllib.error.HTTPError as error:
        headers = {key.lower(): value for key, value in error.headers.items()}
        return error.code, headers, error.read().decode()


def _metrics(server: ServingProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.ports.metrics}/metrics") as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("portico_request_bytes"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_a_streamed_requests_bytes_stay_counted_until_its_answer_goes(
    identity_server: ServingProcess,
) -> None:
    """A stream whose client stops reading keeps its requests counted while their answers wait
    for it, so the budget bounds what such a stream holds: later requests are refused in-band,
    and everything is given back once the client reads."""
    server = identity_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.grpc_url.rsplit(":", 1)
    x = np.arange(MiB // 4, dtype=np.float32)  # 1 MiB, its answer as many: four or so fit
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, x.size])
    request.raw_input_contents.append(x.tobytes())
    sent = 12
    with RawGrpc(host, int(port)) as raw:
        sid = raw.open(STREAM)
        unread = _send_unread(raw, sid, grpc_message(request.SerializeToString()) * sent)
        _wait_for(lambda: budget.refused >= 1, "a streamed request refused")
        time.sleep(0.5)  # NOTE: the held answers stay counted: nothing the server does
        # gives them back while the client waits. Each counts its request's bytes (admitted
        # within the budget) and its outputs as many (``test_request_bytes_outputs.py``).
        assert 5 * MiB < budget.held <= 2 * BUDGET
        # One budget: an HTTP request larger than what is left of it is refused too.
        left = max(BUDGET - budget.held, 0)
        assert _generate(server, [2.0] * (left // 5 + 1000))[0] == 503  # 5 bytes a value

        raw.h2.acknowledge_received_data(unread.acknowledge, sid)
        raw.send(sid, b"", end=True)
        answer = raw.wait(sid, timeout_s=60)
    answers = [service_pb2.ModelStreamInferResponse.FromString(message)
               for message in Answer(data=unread.data + answer.data).messages()]  # fmt: skip
    assert answer.grpc_status == 0 and len(answers) == sent
    refused = [a for a in answers if a.error_message]
    assert 1 <= len(refused) == budget.refused - 1 <= sent - 4  # and the HTTP request
    assert all("overloaded" in a.error_message for a in refused)
    for served in (a for a in answers if not a.error_message):
        output = np.frombuffer(served.infer_response.raw_output_contents[0], np.float32)
        np.testing.assert_array_equal(output, x)
    _wait_for(lambda: budget.held == 0, "the budget back once the answers went")

    with RawGrpc(host, int(port)) as raw:  # a client that resets its stream instead
        sid = raw.open(STREAM)
        _send_unread(raw, sid, grpc_message(request.SerializeToString()) * sent)
        _wait_for(lambda: budget.held > 5 * MiB, "the unread answers counted")
        raw.reset(sid)
        _wait_for(lambda: budget.held == 0, "the budget back once the stream ended")


@dataclasses.dataclass
class _Unread:
    data: bytes = b""  # the server's answer bytes that came while sending
    acknowledge: int = 0  # their flow-controlled length, not yet given back to the server


def _send_unread(raw: RawGrpc, sid: int, payload: bytes) -> _Unread:
    """``payload`` on stream ``sid`` as the server's windows let it through, reading what the
    server sends meanwhile (its window updates) but acknowledging none of its answer data: a
    client that stops reading once its own window is full."""
    unread, view = _Unread(), memoryview(payload)
    while view:
        room = min(raw.h2.local_flow_control_window(sid), raw.h2.max_outbound_frame_size)
        if room <= 0:
            for event in raw.h2.receive_data(raw.sock.recv(65536)):
                if isinstance(event, h2_events.DataReceived) and event.stream_id == sid:
                    unread.data += event.data
                    unread.acknowledge += event.flow_controlled_length
            continue
        raw.h2.send_data(sid, bytes(view[:room]))
        raw.sock.sendall(raw.h2.data_to_send())
        view = view[room:]
    return unread
