"""Memory and liveness under abuse: a real serving process must keep its resident memory under a
documented bound and keep answering ``/v2/health/live`` quickly while hostile clients hold
connections open, send 64 MiB bodies, flood a gRPC stream and abandon backlogged sequences.

Health latency is judged as percentiles over probes on fresh connections every 50 ms: the issue's
100 ms as the median, and ``HEALTH_P95_ALLOWANCE_S`` for the tail. No whole-body work is left on
the event loop (a 64 MiB body fills one buffer chunk by chunk; outputs are sent from their own
memory), so what remains in the tail is the machine: on two cores shared with other jobs the
server's threads wait for a CPU, and probes with them; docs/serving.md records what was measured.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.acceptance.server import ServerProcess
from tests.serving.hostile import Watch, hostile_server, rss_bytes

pytestmark = pytest.mark.embedded

MiB = 1024 * 1024
# The serving process's own resident memory, during and after each abuse (docs/serving.md).
MAX_RSS_BYTES = 1536 * MiB
HEALTH_P50_S = 0.1  # the figure, as the median of the probes during the abuse
HEALTH_P95_ALLOWANCE_S = 1.0  # room for a CI machine shared with other jobs (see the docstring)
MIN_PROBES = 10  # enough for a percentile; the watch goes on probing until it has them
SLOW_CLIENTS = 1000
SLOW_CLIENTS_HOLD_S = 6.0
BIG_BODIES, BIG_BODY_ROUNDS = 4, 2  # 4 at once, twice: enough probes for a percentile
STREAMS, MESSAGES_PER_STREAM = 8, 5000
ABANDONED_SEQUENCES = 400


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    with hostile_server(repo) as process:
        yield process


def assert_healthy(watch: Watch, server: ServerProcess) -> None:
    print(watch.summary())
    assert not watch.failures, watch.failures[:5]
    assert len(watch.latencies_s) >= MIN_PROBES
    assert watch.percentile_s(0.5) < HEALTH_P50_S, watch.summary()
    assert watch.percentile_s(0.95) < HEALTH_P95_ALLOWANCE_S, watch.summary()
    assert watch.peak_rss_bytes < MAX_RSS_BYTES, watch.summary()
    assert rss_bytes(server) < MAX_RSS_BYTES
    assert infer_identity(server, np.arange(4, dtype=np.float32)) == 200


def infer_identity(server: ServerProcess, x: np.ndarray) -> int:  # type: ignore[type-arg]
    body = {"inputs": [{"name": "INPUT0", "shape": [1, x.size], "datatype": "FP32",
                        "data": x.tolist()}]}  # fmt: skip
    return post(server, "/v2/models/identity/infer", json.dumps(body).encode())[0]


def post(server: ServerProcess, path: str, body: bytes, **headers: str) -> tuple[int, bytes]:
    host, port = server.http.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# ------------------------------------------------------------------------------- slow clients


async def _slow_client(host: str, port: int, index: int, until: float) -> None:
    """Half send their headers a line at a time, half declare a 64 MiB body (the most allowed) and
    send it a byte at a time: nothing may be set aside for bytes that have not come."""
    _, writer = await asyncio.open_connection(host, port)
    try:
        if index % 2:
            writer.write(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n")
            lines = (f"X-Slow-{n}: {n}\r\n".encode() for n in range(10_000))
        else:
            writer.write(
                b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 67108864\r\n\r\n{"
            )
            lines = (b" " for _ in range(10_000))
        while time.monotonic() < until:
            writer.write(next(lines))
            await writer.drain()
            await asyncio.sleep(0.5)
    finally:
        writer.close()


def test_a_thousand_slow_clients_leave_memory_bounded_and_health_fast(
    server: ServerProcess,
) -> None:
    host, port = server.http.split(":")
    until = time.monotonic() + SLOW_CLIENTS_HOLD_S

    held: list[int] = []

    async def abuse() -> None:
        clients = asyncio.gather(*(_slow_client(host, int(port), i, until)
                                   for i in range(SLOW_CLIENTS)))  # fmt: skip
        await asyncio.sleep(SLOW_CLIENTS_HOLD_S / 2)
        held.append(_open_connections(server, int(port)))
        await clients

    with Watch(server, min_probes=MIN_PROBES) as watch:
        asyncio.run(abuse())
    assert held[0] >= SLOW_CLIENTS  # the server really held them all at once
    assert_healthy(watch, server)


def _open_connections(server: ServerProcess, port: int) -> int:
    connections = psutil.Process(server.process.pid).net_connections(kind="tcp")
    return sum(1 for c in connections if c.laddr and c.laddr.port == port and c.raddr)


# ------------------------------------------------------------------------------ 64 MiB bodies


def _big_body() -> tuple[bytes, str]:
    """A binary-extension request to ``identity`` that fills the 64 MiB limit."""
    count = (64 * MiB - 512) // 4
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, count], "datatype": "FP32",
                                     "parameters": {"binary_data_size": count * 4}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    return header + np.ones(count, dtype=np.float32).tobytes(), str(len(header))


def _declare_too_big(server: ServerProcess) -> bytes:
    """Headers announcing one byte past the limit: refused before any of the body is read."""
    host, port = server.http.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % (64 * MiB + 1)
        )
        return sock.recv(4096)


def test_concurrent_64_mib_bodies_leave_memory_bounded_and_health_fast(
    server: ServerProcess,
) -> None:
    body, header_length = _big_body()
    statuses: list[int] = []
    with (
        Watch(server, min_probes=MIN_PROBES) as watch,
        concurrent.futures.ThreadPoolExecutor(BIG_BODIES + 1) as pool,
    ):
        for _ in range(BIG_BODY_ROUNDS):
            answers = [pool.submit(post, server, "/v2/models/identity/infer", body,
                                   **{"Inference-Header-Content-Length": header_length})
                       for _ in range(BIG_BODIES)]  # fmt: skip
            refused = pool.submit(_declare_too_big, server)
            statuses += [a.result(timeout=300)[0] for a in answers]
            assert refused.result(timeout=300).startswith(b"HTTP/1.1 413")
    assert statuses == [200] * BIG_BODIES * BIG_BODY_ROUNDS
    assert_healthy(watch, server)


# ------------------------------------------------------------------------ gRPC stream flood


def _flood(server: ServerProcess, stop: threading.Event) -> int:
    """One stream: a fast writer of ``MESSAGES_PER_STREAM`` requests, a reader that starts late."""
    x = np.ones((1, 1024), dtype=np.float32).tobytes()

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        for n in range(MESSAGES_PER_STREAM):
            if stop.is_set():
                return
            request = service_pb2.ModelInferRequest(model_name="identity", id=str(n))
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1024])
            request.raw_input_contents.append(x)
            yield request

    with grpc.insecure_channel(server.grpc) as channel:
        replies = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        stop.wait(3.0)  # the server's answers pile up against a client that does not read
        answered = 0
        for reply in replies:
            assert not reply.error_message, reply.error_message
            answered += 1
        return answered


def test_a_flood_of_stream_messages_leaves_memory_bounded_and_health_fast(
    server: ServerProcess,
) -> None:
    stop = threading.Event()
    with (
        Watch(server, min_probes=MIN_PROBES) as watch,
        concurrent.futures.ThreadPoolExecutor(STREAMS) as pool,
    ):
        floods = [pool.submit(_flood, server, stop) for _ in range(STREAMS)]
        answered = [f.result(timeout=240) for f in floods]
    assert answered == [MESSAGES_PER_STREAM] * STREAMS
    assert_healthy(watch, server)


# ------------------------------------------------------------------- abandoned sequences


def _start_and_walk_away(host: str, port: int, sequence_id: int) -> None:
    body = json.dumps(
        {
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
            "parameters": {"sequence_id": sequence_id, "sequence_start": True},
        }
    ).encode()
    head = (
        f"POST /v2/models/simple_sequence/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(head + body)  # and close without reading the answer


def test_abandoned_sequences_leave_memory_bounded_and_slots_free(server: ServerProcess) -> None:
    host, port = server.http.split(":")
    with Watch(server, min_probes=MIN_PROBES) as watch:
        for sequence_id in range(1, ABANDONED_SEQUENCES + 1):
            _start_and_walk_away(host, int(port), 10_000 + sequence_id)
        time.sleep(1.0)
        assert _sequence_completes(server, 99_999) == [2, 2]  # READY * (INPUT + START)
    assert_healthy(watch, server)


def _sequence_completes(server: ServerProcess, sequence_id: int) -> list[int]:
    """A well-behaved sequence (START, then END) gets a slot within a bounded wait."""
    outputs: list[int] = []
    for value, flags in ((1, {"sequence_start": True}), (2, {"sequence_end": True})):
        body = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}
                ],
                "parameters": {"sequence_id": sequence_id, **flags},
            }
        ).encode()
        deadline = time.monotonic() + 90
        while True:
            status, answer = post(server, "/v2/models/simple_sequence/infer", body)
            if status != 503 or time.monotonic() > deadline:  # 503: the backlog is full for now
                break
            time.sleep(0.5)
        assert status == 200, answer
        outputs.append(json.loads(answer)["outputs"][0]["data"][0])
    return outputs
