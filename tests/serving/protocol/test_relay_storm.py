"""A storm of clients, over each way of serving (in-process on h2corn, in-process on the loop's own
HTTP/2 listener, through front-end processes): many at once, some answered, some past their
deadline, some that leave mid-call, mid-body or mid-stream (unary calls, request streams, an
ensemble, a decoupled model's responses over gRPC and as Server-Sent Events).

Every answer must be right, the statistics must count what ran (within what the clients saw),
the metrics port must agree with them, and once the clients are gone nothing may still be held
for them: no request in a model's version (a swap would wait on it), none pending in a queue,
and nothing at the serving process's end of a front-end's socket (a call left there holds its
request bytes for the life of the front-end). The loop's own HTTP/2 listener's bookkeeping of a
reset call is ``test_grpc_http2``'s."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import urllib.request
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
from tests.serving.backends.python.test_decoupled import REPEAT, REPEAT_CONFIG
from tests.serving.harness import folder_settings

pytestmark = pytest.mark.embedded

CALLS = 300
CONCURRENCY = 32
SLEEP_MS = 300  # the sleep model's execute: far past the deadline calls' deadline
DEADLINE_S = 0.02
MODELS = ("identity", "sleep", "second", "chain", "repeat")


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
    dm.write_onnx_identity(repo, "second", dims=(-1,), max_batch_size=8)
    tensor = dm.TensorDecl
    dm.write_ensemble(
        repo, "chain",
        [dm.EnsembleStep("identity", {"INPUT0": "IN"}, {"OUTPUT0": "middle"}),
         dm.EnsembleStep("second", {"INPUT0": "middle"}, {"OUTPUT0": "OUT"})],
        inputs=[tensor("IN", "FP32", (-1,))], outputs=[tensor("OUT", "FP32", (-1,))],
        max_batch_size=8,
    )  # fmt: skip
    dm.write_python_model(repo, "repeat", REPEAT, REPEAT_CONFIG)  # decoupled
    process = ServingProcess(folder_settings(repo, **SERVING[request.param])).start()
    yield process
    process.stop()


def _held(server: ServingProcess) -> dict[str, int]:
    """What is still held for clients: requests in each model's version, requests pending in
    its queue, calls at each front-end socket's serving end."""
    assert server.server is not None
    held = {}
    for model in MODELS:
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


def _metrics(server: ServingProcess, model: str) -> dict[str, float]:
    """The model's series on the metrics port, by metric name."""
    url = f"http://127.0.0.1:{server.ports.metrics}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        if f'model="{model}",version="1"' in line and not line.startswith("#"):
            found[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return found


def _assert_metrics_agree(server: ServingProcess) -> None:
    """What the clients' protocol says of the storm is what Prometheus scrapes."""
    for model in ("identity", "chain"):
        metrics = _metrics(server, model)
        assert metrics["nv_inference_request_success"] == _successes(server, model), metrics
        assert metrics["nv_inference_pending_request_count"] == 0, metrics


def _successes(server: ServingProcess, model: str) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(model).model_stats[0]
    return int(stats.inference_stats.success.count)


def _fp32(values: np.ndarray) -> grpcaio.InferInput:  # type: ignore[type-arg]
    tensor = grpcaio.InferInput("INPUT0", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return tensor


async def test_a_grpc_storm_is_answered_right_and_leaves_nothing_held(
    server: ServingProcess,
) -> None:
    rng = random.Random(5)
    before = _successes(server, "identity")
    outcomes: Counter[str] = Counter()  # calls by how they ended
    ran: Counter[str] = Counter()  # identity requests: answered, or may have run unseen
    slots = asyncio.Semaphore(CONCURRENCY)
    client = grpcaio.InferenceServerClient(server.grpc_url)

    async def call(
        model: str, tensor: Any, output: str, values: Any, kind: str, *, leave: bool
    ) -> None:
        """One unary call; with ``leave`` the client leaves at once or after a moment, its
        answer possibly on its way."""
        running = asyncio.ensure_future(client.infer(model, [tensor]))
        if leave:
            await asyncio.sleep(rng.choice((0.0, 0.0005, 0.002)))
            running.cancel()
        try:
            result = await running
        except asyncio.CancelledError:
            outcomes[f"{kind} left"] += 1
            ran["maybe"] += 1
        else:
            np.testing.assert_array_equal(result.as_numpy(output), values)
            outcomes[f"{kind} answered"] += 1
            ran["answered"] += 1

    async def stream(values: np.ndarray) -> None:  # type: ignore[type-arg]
        """A stream of a few requests, read whole or left after some of its answers."""
        count, keep = rng.randint(1, 6), rng.randint(0, 6)
        seen: list[int] = []
        enough = asyncio.Event()

        async def requests() -> Any:
            for offset in range(count):
                yield {"model_name": "identity", "inputs": [_fp32(values + offset)],
                       "request_id": str(offset)}  # fmt: skip

        async def read() -> None:
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                offset = int(result.get_response().id)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values + offset)
                seen.append(offset)
                if len(seen) == keep:
                    enough.set()

        reading = asyncio.ensure_future(read())
        if keep >= count:
            await reading
            assert sorted(seen) == list(range(count))
            outcomes["stream read whole"] += 1
        else:
            await asyncio.wait((reading, asyncio.ensure_future(enough.wait())),
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            outcomes["stream left"] += 1
            ran["maybe"] += count - len(seen)
        ran["answered"] += len(seen)

    async def decoupled() -> None:
        """A decoupled model's n responses on a stream: read whole, or left after some; or its
        endless responses (until it sees the client gone), left after some."""
        count, keep = rng.randint(1, 20), rng.randint(1, 25)
        endless = rng.random() < 0.25
        seen: list[int] = []
        enough = asyncio.Event()
        tensor = grpcaio.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
        parameters = {"until_cancelled": True} if endless else {}

        async def requests() -> Any:
            yield {"model_name": "repeat", "inputs": [tensor], "parameters": parameters}

        async def read() -> None:
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                seen.append(int(result.as_numpy("OUT")[0]))
                if len(seen) == count:
                    return  # the stream stays open for more requests: done here
                if len(seen) == keep:
                    enough.set()

        reading = asyncio.ensure_future(read())
        await asyncio.wait((reading, asyncio.ensure_future(enough.wait())),
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        if endless:
            assert set(seen) <= {7}
            outcomes["decoupled endless left"] += 1
            return
        assert seen == [count * 10 + i for i in range(len(seen))]
        outcomes["decoupled read whole" if len(seen) == count else "decoupled left"] += 1

    async def one(index: int) -> None:
        kind = rng.choice(("answered", "deadline", "left", "stream", "ensemble", "decoupled"))
        values = np.arange(rng.randint(1, 64), dtype=np.float32).reshape(1, -1) + index
        async with slots:
            if kind == "answered":
                await call("identity", _fp32(values), "OUTPUT0", values, "unary", leave=False)
            elif kind == "deadline":
                with pytest.raises(InferenceServerException, match="Deadline"):
                    await client.infer("sleep", [_fp32(values[0])], client_timeout=DEADLINE_S,
                                       parameters={"execute_delay_ms": SLEEP_MS})  # fmt: skip
                outcomes["deadline"] += 1
            elif kind == "left":
                await call("identity", _fp32(values), "OUTPUT0", values, "unary", leave=True)
            elif kind == "stream":
                await stream(values)
            elif kind == "ensemble":  # identity, then second
                tensor = grpcaio.InferInput("IN", list(values.shape), "FP32")
                tensor.set_data_from_numpy(values)
                leave = rng.random() < 0.5
                await call("chain", tensor, "OUT", values, "ensemble", leave=leave)
            else:
                await decoupled()

    try:
        await asyncio.gather(*(one(index) for index in range(CALLS)))
        assert await client.is_server_ready()
    finally:
        await client.close()
    await _until_nothing_is_held(server)
    kinds = ("deadline", "unary left", "stream left", "ensemble left", "decoupled left",
             "decoupled endless left")  # fmt: skip
    assert all(outcomes[kind] for kind in kinds), outcomes
    # A request whose client left may still have run: its answer was on its way back.
    successes = _successes(server, "identity") - before
    assert ran["answered"] <= successes <= ran["answered"] + ran["maybe"], (successes, ran)
    _assert_metrics_agree(server)


async def _http(
    server: ServingProcess, model: str, body: dict[str, Any], *, leave_after_s: float | None = None,
    cut: bool = False, endpoint: str = "infer",
) -> tuple[int, dict[str, Any]] | None:  # fmt: skip
    """One request on its own connection; with ``leave_after_s`` the client closes it then,
    unanswered, and with ``cut`` it sends only half of the body first."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.ports.http)
    payload = json.dumps(body).encode()
    sent = payload[: len(payload) // 2] if cut else payload
    writer.write(b"POST /v2/models/%s/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                 % (model.encode(), endpoint.encode(), len(payload), sent))  # fmt: skip
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


async def test_an_http_storm_is_answered_right_and_leaves_nothing_held(
    server: ServingProcess,
) -> None:
    rng = random.Random(6)
    before = _successes(server, "identity")
    outcomes: Counter[str] = Counter()
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> None:
        values = [float(index + i) for i in range(rng.randint(1, 64))]
        tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, len(values)], "data": values}
        kind = rng.choice(("answered", "left", "left mid-body", "left while it ran",
                           "left mid-stream", "left an endless stream"))  # fmt: skip
        async with slots:
            if kind == "answered":
                answer = await _http(server, "identity", {"inputs": [tensor]})
                assert answer is not None and answer[0] == 200, answer
                assert answer[1]["outputs"][0]["data"] == values
            elif kind == "left":
                await _http(server, "identity", {"inputs": [tensor]},
                            leave_after_s=rng.choice((0.0, 0.001)))  # fmt: skip
            elif kind == "left mid-body":
                await _http(server, "identity", {"inputs": [tensor]}, leave_after_s=0.005, cut=True)
            elif kind == "left while it ran":
                sleeping = {"parameters": {"execute_delay_ms": SLEEP_MS},
                            "inputs": [dict(tensor, shape=[len(values)])]}  # fmt: skip
                await _http(server, "sleep", sleeping, leave_after_s=0.01)
            elif kind == "left mid-stream":  # a decoupled model's Server-Sent Events
                leave_after_s = rng.choice((0.0, 0.005))
                await _http(server, "repeat", {"IN": rng.randint(1, 50)},
                            endpoint="generate_stream", leave_after_s=leave_after_s)  # fmt: skip
            else:  # the model sends until it sees the client gone
                await _http(server, "repeat", {"IN": 1, "parameters": {"until_cancelled": True}},
                            endpoint="generate_stream", leave_after_s=0.02)  # fmt: skip
        outcomes[kind] += 1

    await asyncio.gather(*(one(index) for index in range(CALLS)))
    await _until_nothing_is_held(server)
    # A request whose client left may still have run; one cut mid-body never reaches the model.
    successes = _successes(server, "identity") - before
    assert outcomes["answered"] <= successes <= outcomes["answered"] + outcomes["left"], (
        successes, outcomes,
    )  # fmt: skip
    _assert_metrics_agree(server)
