"""A decoupled model that sends faster than its client reads: past ``--max-unread-response-bytes``
the model's sends wait for the client; a client that has not read half of what waits within
``--unread-response-timeout-secs`` gets UNAVAILABLE after the responses already waiting, the model
sees the request cancelled, and the metrics count it; a client that reads slowly gets every
response."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from repository import demo_models as dm
from serving.core.streaming import RESPONSE_OVERHEAD_BYTES
from serving.main import ServingProcess
from tests.serving.harness import serving
from tests.serving.protocol.h2_client import Answer, RawGrpc, grpc_message

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

KiB = 1024
LIMIT = 4 * KiB * KiB
RESPONSE_BYTES = 64 * KiB  # each response's OUT: 16,384 INT32 values
MOST = 2000  # responses the model sends at most (125 MiB): far past the limit
# NOTE: a slow reader must read half of what waits within it after it has seen the model wait
# HELD_MS, each look costing a question on a new connection: 1 s was once not enough in a
# loaded CI run (the stream ended for not reading).
TIMEOUT_S = 3.0
HELD_MS = 100  # a send held back this long waits for its client, not for the machine
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"

# IN = [n] streams n responses OUT = [i] * 16384 from a thread, as fast as it can, until the
# client goes away or it has sent them all; a request with the parameter "report" and IN = [n]
# waits for the run of n to end and answers [responses sent, whether it saw its request
# cancelled, the longest one send took in ms]; one with "waiting" answers at once [how long the
# run of n's send in progress has waited so far in ms, 0 between sends] (each test floods a
# different n: the warm-up at load floods n = 0).
FLOOD = textwrap.dedent("""\
    import json
    import threading
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    PACED_SENDS = 5


    class TritonPythonModel:
        def initialize(self, args):
            self.finished = threading.Condition()
            self.outcomes = {}  # n: [sent, cancelled, longest send in ms]
            self.sending = {}  # n: when its send in progress began (None between sends)

        def flood(self, sender, n, paced_ms=0):
            sent = longest = 0
            while sent < n and not sender.is_cancelled():
                if 0 < sent <= PACED_SENDS:
                    time.sleep(paced_ms / 1000)  # "paced_ms": a pause before each of these
                out = pb_utils.Tensor("OUT", np.full(16384, sent, dtype=np.int32))
                started = self.sending[n] = time.monotonic()
                sender.send(pb_utils.InferenceResponse([out]))
                self.sending[n] = None
                longest = max(longest, time.monotonic() - started)
                sent += 1
            with self.finished:
                self.outcomes[n] = [sent, int(sender.is_cancelled()), int(longest * 1000)]
                self.finished.notify_all()
            sender.send(flags=FINAL)

        def execute(self, requests):
            for request in requests:
                sender = request.get_response_sender()
                n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
                # NOTE: both from a thread: execute returns at once, so a report that comes
                # before its flood does not hold the one instance the flood needs.
                asked = json.loads(request.parameters())
                work, args = self.flood, (sender, n, asked.get("paced_ms", 0))
                if asked.get("report"):
                    work, args = self.report, (sender, n)
                elif asked.get("waiting"):
                    work, args = self.waiting, (sender, n)
                threading.Thread(target=work, args=args).start()
            return None

        def waiting(self, sender, n):
            started = self.sending.get(n)
            waited = 0 if started is None else int((time.monotonic() - started) * 1000)
            out = pb_utils.Tensor("OUT", np.array([waited], np.int32))
            sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)

        def report(self, sender, n):
            with self.finished:
                self.finished.wait_for(lambda: n in self.outcomes, 60)
            out = pb_utils.Tensor("OUT", np.array(self.outcomes.get(n, []), np.int32))
            sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
""")

FLOOD_CONFIG = """
backend: "python" max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [-1] }
instance_group { kind: KIND_CPU }
model_transaction_policy { decoupled: true }
"""


@pytest.fixture(
    scope="module",
    params=[{}, {"grpc_workers": 1, "http_workers": 1}],
    ids=["in-process", "behind-front-ends"],
)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    """The limit lives in the serving process: front-ends pass a stream's answers on only as
    their client takes them, so it holds behind them too."""
    repo: Path = tmp_path_factory.mktemp("unread")
    dm.write_python_model(repo, "flood", FLOOD, FLOOD_CONFIG)
    bounds = {"max_unread_response_bytes": LIMIT, "unread_response_timeout_s": TIMEOUT_S}
    with serving(repo, **bounds, **request.param) as process:
        yield process


def flood_request(n: int) -> bytes:
    """A ``ModelStreamInfer`` message asking the flood model for ``n`` responses."""
    request = service_pb2.ModelInferRequest(model_name="flood", id=f"flood-{n}")
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([n], dtype=np.int32).tobytes())
    return grpc_message(request.SerializeToString())


def report(server: ServingProcess, n: int) -> list[int]:
    """[responses the flood of ``n`` sent, whether it saw its request cancelled, the longest
    one send took in ms]."""
    return ask(server, n, "report")


def send_waited_ms(server: ServingProcess, n: int) -> int:
    """How long the flood of ``n``'s send in progress has waited so far (0 between sends)."""
    return ask(server, n, "waiting")[0]


def ask(server: ServingProcess, n: int, question: str) -> list[int]:
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    # NOTE: a connection of its own: gRPC channels to one address share one by default, and
    # the flood's unread answers may hold up the others on it (h2corn's writer queue).
    own_connection = [("grpc.use_local_subchannel_pool", 1)]
    with grpcclient.InferenceServerClient(server.grpc_url, channel_args=own_connection) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
        client.async_stream_infer("flood", [tensor], parameters={question: True})
        result, error = answers.get(timeout=90)
        client.stop_stream()
    assert error is None, error
    return list(result.as_numpy("OUT").tolist())


def ended_unread(server: ServingProcess) -> float:
    url = f"http://127.0.0.1:{server.ports.metrics}/metrics"
    with urllib.request.urlopen(url) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("portico_stream_requests_ended_unread_total "):
                return float(line.split()[1])
    raise AssertionError("no portico_stream_requests_ended_unread_total in the metrics")


def test_a_client_that_stops_reading_ends_its_request_and_the_model_stops(
    server: ServingProcess,
) -> None:
    before = ended_unread(server)
    host, port = server.grpc_url.rsplit(":", 1)
    with RawGrpc(host, int(port)) as raw:  # reads nothing until the model has stopped
        sid = raw.open(STREAM)
        raw.send(sid, flood_request(MOST))
        sent, cancelled, longest_ms = report(server, MOST)
        assert cancelled == 1
        # What the limit lets wait, the stream's own queue of answers, what HTTP/2 lets through
        # before the client's window is full, and what the model sent before it was held back.
        assert sent < MOST // 2
        assert longest_ms >= TIMEOUT_S * 1000 / 2  # held back until the timeout ended it
        raw.send(sid, b"", end=True)
        answer = raw.wait(sid, timeout_s=60)
    assert answer.grpc_status == 0  # the stream itself ends well: the error is in-band
    messages = [service_pb2.ModelStreamInferResponse.FromString(message)
                for message in Answer(data=answer.data).messages()]  # fmt: skip
    *responses, last = messages
    assert "model 'flood' did not read its responses: they waited past" in last.error_message
    bound = f"limit of {LIMIT} (--max-unread-response-bytes) for {TIMEOUT_S:g} s"
    assert bound in last.error_message
    # Every response that waited arrives, in order, before the error.
    values = [np.frombuffer(r.infer_response.raw_output_contents[0], np.int32)[0]
              for r in responses]  # fmt: skip
    assert values == list(range(len(responses)))
    assert LIMIT // (RESPONSE_BYTES + RESPONSE_OVERHEAD_BYTES) <= len(responses) <= sent
    assert ended_unread(server) == before + 1


def test_a_generate_stream_client_that_stops_reading_gets_the_error_as_its_last_event(
    server: ServingProcess,
) -> None:
    before = ended_unread(server)
    host, port = server.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.connect()
    assert connection.sock is not None  # NOTE: a small receive buffer: the kernel holds less
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
    n = MOST + 1
    connection.request("POST", "/v2/models/flood/generate_stream", json.dumps({"IN": n}))
    sent, cancelled, _ = report(server, n)  # meanwhile this client reads nothing
    assert cancelled == 1 and sent < n // 2
    response = connection.getresponse()
    assert response.status == 200
    events = [json.loads(event.removeprefix("data: "))
              for event in response.read().decode().split("\n\n") if event]  # fmt: skip
    connection.close()
    *responses, last = events
    assert "did not read its responses: they waited past the limit" in last["error"]
    assert [event["OUT"][0] for event in responses] == list(range(len(responses)))
    assert ended_unread(server) == before + 1


def test_a_generate_stream_client_that_stops_reading_and_leaves_frees_its_request(
    server: ServingProcess,
) -> None:
    """Its answer usually still waits for room when the client leaves (behind front-ends, in the
    relay's window); once it has left, the request ends and the version holds nothing of it.
    (Not asserted before the client leaves: on a loaded machine the limit may trip while the
    server's own JSON encoding of the events is behind, and the error event then still fits the
    socket's buffers.)"""
    assert server.server is not None
    version = server.server.resolve("flood", None)
    host, port = server.http_url.rsplit(":", 1)
    n = MOST + 2
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
        body = json.dumps({"IN": n}).encode()
        sock.sendall(b"POST /v2/models/flood/generate_stream HTTP/1.1\r\nHost: portico\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        assert report(server, n)[1] == 1
    deadline = time.monotonic() + 30
    while version.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert version.in_flight == 0


def test_a_client_that_reads_slowly_holds_the_model_back_and_gets_every_response(
    server: ServingProcess,
) -> None:
    n = 400  # 25 MiB in all, six times the limit, read over about 2 s
    before = ended_unread(server)
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    waited_ms: list[int] = []

    def take(result: Any, error: Any) -> None:
        # NOTE: in the client's reading thread, so it reads no faster than this. At the first
        # response it reads nothing more until the model's send has waited a while, so the
        # model is held back however fast a loaded machine runs either side (a run that only
        # paced its reads saw no send wait over 7 ms). It must then read half of what waits
        # within the timeout: 32 responses, well under a second.
        if not waited_ms:
            deadline = time.monotonic() + 30
            waited_ms.append(0)
            while waited_ms[0] < HELD_MS and time.monotonic() < deadline:
                time.sleep(0.01)
                waited_ms[0] = send_waited_ms(server, n)
        time.sleep(0.005)
        answers.put((result, error))

    # NOTE: grpc's client grows its receive window with its bandwidth estimate: with it the
    # model sent 293 of the 400 before it was held back behind front-ends (231 without), and
    # a larger estimate would leave it nothing to wait for. Without the estimate the client
    # keeps 64 KiB, and what the model gets ahead by is the server's bound and the transports'
    # fixed buffers.
    fixed_window = [("grpc.http2.bdp_probe", 0)]
    with grpcclient.InferenceServerClient(server.grpc_url, channel_args=fixed_window) as client:
        client.start_stream(callback=take)
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
        client.async_stream_infer("flood", [tensor], enable_empty_final_response=True)
        values = []
        while True:
            result, error = answers.get(timeout=60)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
            values.append(int(result.as_numpy("OUT")[0]))
        client.stop_stream()
    assert values == list(range(n))
    sent, cancelled, longest_ms = report(server, n)
    assert (sent, cancelled) == (n, 0)
    # Its sends waited for the client (one takes well under 10 ms when nothing holds it).
    assert waited_ms[0] >= HELD_MS, "the model was never held back while its client lagged"
    assert longest_ms >= HELD_MS
    assert ended_unread(server) == before
