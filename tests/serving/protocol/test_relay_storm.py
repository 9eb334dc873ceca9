"""A storm of clients, over each way of serving (in-process on h2corn, in-process on the loop's own
HTTP/2 listener, through front-end processes): many at once, some answered, some past their
deadline, some that leave mid-call. Every answer must be right, the model's statistics must count
what ran, and once the clients are gone nothing may still be held for them: no request in a
model's version (a swap would wait on it), none pending in a queue, and nothing at the serving
process's end of a front-end's socket (a call left there holds its request bytes for the life of
the front-end)."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import folder_settings

pytestmark = pytest.mark.embedded

CALLS = 300
CONCURRENCY = 32
SLEEP_MS = 300  # the sleep model's execute: far past the deadline calls' deadline
DEADLINE_S = 0.02


SERVING = {
    "in-process": {},
    "in-process-h2": {"grpc_transport": "h2"},
    "frontends": {"grpc_workers": 2, "http_workers": 2},
}


@pytest.fixture(scope="module", params=list(SERVING))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8, dynamic_batching=True)
    dm.write_python_sleep(repo, "sleep", max_batch_size=0, dims=(-1,), dynamic_batching=False)
    process = ServingProcess(folder_settings(repo, **SERVING[request.param])).start()
    yield process
    process.stop()


def _held(server: ServingProcess) -> dict[str, int]:
    """What is still held for clients: requests in each model's version, requests pending in
    its queue, calls at each front-end socket's serving end."""
    assert server.server is not None
    held = {}
    for model in ("identity", "sleep"):
        version = server.server.resolve(model, None)
        held[f"{model} in flight"] = version.in_flight
        assert version.scheduler is not None
        held[f"{model} queued"] = version.scheduler.queue_depth
        held[f"{model} pending (gauge)"] = version.statistics.pending_request_count
    pools = (server.ports.grpc_frontends, server.ports.http_frontends)
    relays = [f.connection for pool in pools if pool is not None for f in pool.frontends]
    for index, relay in enumerate(relays):
        held[f"relay {index}"] = relay.in_flight
    return held


async def _until_nothing_is_held(server: ServingProcess) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while any((held := _held(server)).values()):
        assert loop.time() < deadline, f"still held after the clients left: {held}"
        await asyncio.sleep(0.05)


def _successes(server: ServingProcess, model: str) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(model).model_stats[0]
    return int(stats.inference_stats.success.count)


def _fp32(values: np.ndarray) -> grpcaio.InferInput:  # type: ignore[type-arg]
    tensor = grpcaio.InferInput("INPUT0", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


async def test_a_grpc_storm_is_answered_right_and_leaves_the_relays_empty(
    server: ServingProcess,
) -> None:
    rng = random.Random(5)
    before = _successes(server, "identity")
    outcomes: Counter[str] = Counter()
    slots = asyncio.Semaphore(CONCURRENCY)
    client = grpcaio.InferenceServerClient(server.grpc_url)

    async def one(index: int) -> None:
        kind = rng.choice(("answered", "deadline", "left"))
        values = np.arange(rng.randint(1, 64), dtype=np.float32).reshape(1, -1) + index
        async with slots:
            if kind == "answered":
                result = await client.infer("identity", [_fp32(values)])
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
            elif kind == "deadline":
                with pytest.raises(InferenceServerException, match="Deadline"):
                    await client.infer("sleep", [_fp32(values[0])], client_timeout=DEADLINE_S,
                                       parameters={"execute_delay_ms": SLEEP_MS})  # fmt: skip
            else:  # the client leaves at once or after a moment, its answer possibly on its way
                call = asyncio.ensure_future(client.infer("identity", [_fp32(values)]))
                await asyncio.sleep(rng.choice((0.0, 0.0005, 0.002)))
                call.cancel()
                try:
                    result = await call
                except asyncio.CancelledError:
                    kind = "left"
                else:
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
                    kind = "answered before it left"
        outcomes[kind] += 1

    try:
        await asyncio.gather(*(one(index) for index in range(CALLS)))
        assert await client.is_server_ready()
    finally:
        await client.close()
    await _until_nothing_is_held(server)
    assert outcomes["deadline"] and outcomes["left"], outcomes
    answered = outcomes["answered"] + outcomes["answered before it left"]
    ran = _successes(server, "identity") - before
    # A call whose client left may still have run: its answer was on its way back.
    assert answered <= ran <= answered + outcomes["left"], (ran, outcomes)


async def _http(server: ServingProcess, model: str, body: dict[str, Any], leave_after_s: float |
                None) -> tuple[int, dict[str, Any]] | None:  # fmt: skip
    """One request on its own connection; with ``leave_after_s``, the client closes it then."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.ports.http)
    payload = json.dumps(body).encode()
    writer.write(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (model.encode(), len(payload), payload))  # fmt: skip
    try:
        if leave_after_s is not None:
            await asyncio.sleep(leave_after_s)
            return None
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))  # fmt: skip
        return status, json.loads(await reader.readexactly(length))
    finally:
        writer.close()


async def test_an_http_storm_is_answered_right_and_leaves_the_relays_empty(
    server: ServingProcess,
) -> None:
    rng = random.Random(6)
    before = _successes(server, "identity")
    outcomes: Counter[str] = Counter()
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> None:
        values = [float(index + i) for i in range(rng.randint(1, 64))]
        tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, len(values)], "data": values}
        kind = rng.choice(("answered", "left", "left while it ran"))
        async with slots:
            if kind == "answered":
                answer = await _http(server, "identity", {"inputs": [tensor]}, None)
                assert answer is not None and answer[0] == 200, answer
                assert answer[1]["outputs"][0]["data"] == values
            elif kind == "left":
                await _http(server, "identity", {"inputs": [tensor]}, rng.choice((0.0, 0.001)))
            else:
                sleeping = {"parameters": {"execute_delay_ms": SLEEP_MS},
                            "inputs": [dict(tensor, shape=[len(values)])]}  # fmt: skip
                await _http(server, "sleep", sleeping, 0.01)
        outcomes[kind] += 1

    await asyncio.gather(*(one(index) for index in range(CALLS)))
    await _until_nothing_is_held(server)
    ran = _successes(server, "identity") - before
    assert outcomes["answered"] <= ran <= outcomes["answered"] + outcomes["left"], (ran, outcomes)
