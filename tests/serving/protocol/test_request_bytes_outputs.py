"""An answer waiting for a client that reads slowly counts its outputs in the replica's budget of
request bytes being served (``--max-in-flight-request-bytes``) until it has gone: a model whose
answers are far larger than its requests makes later requests wait as large requests would,
over HTTP (in-process and behind front-ends), on a ``ModelStreamInfer`` stream and, on the ``h2``
listener, as a unary gRPC answer; so do a decoupled model's responses waiting for a client that
lags. The budget itself is
``test_request_bytes_budget.py``."""

from __future__ import annotations

import http.client
import json
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import HTTP_WORKERS, serving
from tests.serving.protocol.h2_client import Answer, RawGrpc, grpc_message
from tests.serving.protocol.test_request_bytes_budget import (
    BUDGET,
    INFER,
    MAX_REQUEST_BYTES,
    STREAM,
    MiB,
    _metrics,
    _send_unread,
    _wait_for,
)

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

# IN = [n]: OUT holds n zero bytes (a request of a few bytes, an answer of any size).
EXPAND = textwrap.dedent("""\
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [self.expand(request) for request in requests]

        def expand(self, request):
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(n, np.uint8))])
""")

EXPAND_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_UINT8 dims: [-1] }
instance_group { kind: KIND_CPU }
"""

UNREAD_ANSWER = 48 * MiB  # six times the budget, far more than a socket's buffers hold

# Decoupled: IN = [n] sends n responses of OUT = SPRAYED zero bytes from a thread, until its
# client goes away, then the final flag.
SPRAY = textwrap.dedent("""\
    import threading
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
                sender = request.get_response_sender()
                threading.Thread(target=self.spray, args=(sender, n)).start()
            return None

        def spray(self, sender, n):
            for _ in range(n):
                if sender.is_cancelled():
                    break
                out = pb_utils.Tensor("OUT", np.zeros(%d, np.uint8))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
""") % (256 * 1024)

SPRAY_CONFIG = EXPAND_CONFIG + "model_transaction_policy { decoupled: true }\n"

# Twice the budget: a stream holds its model back once this much waits for its client.
UNREAD_LIMIT = 2 * BUDGET


def _serve_expand(repo: Path, **overrides: object) -> Iterator[ServingProcess]:
    dm.write_python_model(repo, "expand", EXPAND, EXPAND_CONFIG)
    dm.write_python_model(repo, "spray", SPRAY, SPRAY_CONFIG)
    with serving(repo, max_request_bytes=MAX_REQUEST_BYTES, max_in_flight_request_bytes=BUDGET,
                 max_unread_response_bytes=UNREAD_LIMIT, **overrides) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=("in-process", "frontends"))
def http_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    yield from _serve_expand(
        tmp_path_factory.mktemp("expand"), http_workers=request.param, grpc_workers=request.param
    )


@pytest.fixture(params=["h2corn", "h2"])
def grpc_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServingProcess]:
    """In-process, its gRPC port on each transport that reads gRPC's framing itself."""
    yield from _serve_expand(tmp_path, grpc_transport=request.param)


@pytest.fixture
def h2_server(tmp_path: Path) -> Iterator[ServingProcess]:
    """In-process, its gRPC port on the ``h2`` listener."""
    yield from _serve_expand(tmp_path, grpc_transport="h2")


def _expand_body(n: int) -> bytes:
    return json.dumps({
        "inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [n]}],
        "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip


def _expand_http(server: ServingProcess, n: int) -> tuple[int, bytes]:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/v2/models/expand/infer", body=_expand_body(n))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _expand_message(n: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="expand")
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([n], dtype=np.int32).tobytes())
    return grpc_message(request.SerializeToString())


@pytest.mark.parametrize("endpoint", ["infer", "generate"])
def test_an_http_answer_counts_its_outputs_until_it_has_gone(
    http_server: ServingProcess, endpoint: str
) -> None:
    server = http_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.http_url.split(":")
    body = _expand_body(UNREAD_ANSWER)
    if endpoint == "generate":  # its JSON answer is twice its outputs' bytes ("0,")
        body = json.dumps({"IN": [UNREAD_ANSWER // 2]}).encode()
    with socket.create_connection((host, int(port)), timeout=60) as unread:
        unread.sendall(b"POST /v2/models/expand/%s HTTP/1.1\r\nHost: t\r\n"
                       b"Content-Length: %d\r\n\r\n%s"
                       % (endpoint.encode(), len(body), body))  # fmt: skip
        # Read no further than the answer's first bytes: the rest waits for this client.
        assert unread.recv(12).startswith(b"HTTP/1.1 200")
        counted = UNREAD_ANSWER if endpoint == "infer" else UNREAD_ANSWER // 2
        _wait_for(lambda: budget.held >= counted, "the unread answer's outputs counted")

        status, answer = _expand_http(server, 4)  # a request of a few bytes
        assert status == 503 and b"overloaded" in answer and b"past %d bytes" % BUDGET in answer
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:  # one budget
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([4], dtype=np.int32))
            with pytest.raises(InferenceServerException, match="overloaded"):
                grpc.infer("expand", [tensor])
        assert _metrics(server)["portico_request_bytes_in_flight"] >= counted
    _wait_for(lambda: budget.held == 0, "the outputs given back once the client left")

    status, answer = _expand_http(server, MiB)  # and an answer that goes is given back too
    assert status == 200 and answer.endswith(bytes(MiB))
    _wait_for(lambda: budget.held == 0, "the outputs of an answer that went given back")


def test_a_decoupled_models_responses_waiting_for_its_client_count_until_read(
    http_server: ServingProcess,
) -> None:
    """``generate_stream`` to a client that reads none of its events: the model's responses
    wait in the request's stream up to ``--max-unread-response-bytes`` (the model held back
    there), counted in the budget meanwhile, so other requests are refused instead of many such
    streams each holding that much outside it; all given back once the client leaves."""
    server = http_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.http_url.split(":")
    body = json.dumps({"IN": [1000]}).encode()  # 250 MiB if it were all read
    with socket.create_connection((host, int(port)), timeout=60) as unread:
        unread.sendall(b"POST /v2/models/spray/generate_stream HTTP/1.1\r\nHost: t\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        assert unread.recv(12).startswith(b"HTTP/1.1 200")
        # What waits past what the sockets (and a front-end's window) took: the limit.
        _wait_for(lambda: budget.held >= UNREAD_LIMIT, "the waiting responses counted")
        status, answer = _expand_http(server, 4)
        assert status == 503 and b"overloaded" in answer
        assert budget.held <= 2 * UNREAD_LIMIT  # held back: no more than twice the limit
    _wait_for(lambda: budget.held == 0, "the waiting responses given back once the client left")
    status, _ = _expand_http(server, 4)
    assert status == 200


def test_a_streams_answers_count_their_outputs_until_they_have_gone(
    grpc_server: ServingProcess,
) -> None:
    """A stream whose client reads none of its answers: each holds its outputs in the budget
    until it has gone, so the stream's later requests (and everyone else's) are refused
    instead of piling up more answers, and everything is given back once the client reads."""
    server = grpc_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.grpc_url.rsplit(":", 1)
    each, served, later = 3 * MiB, 4, 3  # 12 MiB of answers to requests of a few bytes
    with RawGrpc(host, int(port)) as raw:
        sid = raw.open(STREAM)
        unread = _send_unread(raw, sid, _expand_message(each) * served)
        _wait_for(lambda: budget.held > BUDGET, "the unread answers' outputs counted")
        assert budget.refused == 0
        more = _send_unread(raw, sid, _expand_message(each) * later)
        _wait_for(lambda: budget.refused == later, "the later requests refused")
        status, answer = _expand_http(server, 4)  # one budget
        assert status == 503 and b"overloaded" in answer

        raw.h2.acknowledge_received_data(unread.acknowledge + more.acknowledge, sid)
        raw.send(sid, b"", end=True)
        rest = raw.wait(sid, timeout_s=60)
    data = unread.data + more.data + rest.data
    answers = [
        service_pb2.ModelStreamInferResponse.FromString(m) for m in Answer(data=data).messages()
    ]
    # NOTE: in the order they were answered: a refusal may pass an answer still being made.
    refused = [a for a in answers if a.error_message]
    assert rest.grpc_status == 0 and (len(answers), len(refused)) == (served + later, later)
    assert all("overloaded" in a.error_message for a in refused)
    for answered in (a for a in answers if not a.error_message):
        assert answered.infer_response.raw_output_contents[0] == bytes(each)
    _wait_for(lambda: budget.held == 0, "the budget back once the answers went")


def test_a_unary_grpc_answer_waiting_for_its_client_counts_until_it_has_gone(
    h2_server: ServingProcess,
) -> None:
    """On the ``h2`` listener, a unary answer larger than its client's window waits in the call's
    outbox, counted in the budget until it has gone: clients that read nothing make other
    requests wait instead of holding answers of any size outside it. (h2corn takes an answer
    whole and tells nothing of when it has gone; ``docs/serving.md`` says so.)"""
    server = h2_server
    assert server.server is not None
    budget = server.server.request_bytes
    host, port = server.grpc_url.rsplit(":", 1)
    each = 3 * MiB  # three such answers pass the budget; requests of a few bytes
    with RawGrpc(host, int(port)) as raw:
        calls = [raw.open(INFER) for _ in range(3)]
        for sid in calls:
            raw.send(sid, _expand_message(each), end=True)
        # Past this client's window (HTTP/2's 64 KiB, never raised), the answers wait.
        _wait_for(lambda: budget.held > BUDGET, "the waiting answers counted")
        status, answer = _expand_http(server, 4)
        assert status == 503 and b"overloaded" in answer and b"past %d bytes" % BUDGET in answer

        for sid in calls:  # read, with the window given back as they come
            answered = raw.wait(sid, timeout_s=60)
            assert answered.grpc_status == 0, answered.trailers
            [message] = answered.messages()
            response = service_pb2.ModelInferResponse.FromString(message)
            assert response.raw_output_contents[0] == bytes(each)
        _wait_for(lambda: budget.held == 0, "the answers given back once they went")

        unread = raw.open(INFER)
        raw.send(unread, _expand_message(each), end=True)
        _wait_for(lambda: budget.held > each - MiB, "an answer waiting again")
    # The client left without reading it: nothing can go, and it is given back.
    _wait_for(lambda: budget.held == 0, "the answer given back once its client left")
    status, _ = _expand_http(server, 4)
    assert status == 200
