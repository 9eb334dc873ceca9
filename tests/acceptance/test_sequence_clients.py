"""The sequence client examples: ``simple_{http,grpc}_sequence_sync_infer_client.py`` and
``simple_grpc_sequence_stream_infer_client.py`` (plain and ``--dyna``), plus the aio variants.

Two sequences: ``[0] + [11, 7, 5, 3, 2, 0, 1]`` and ``[100] + [-11, -7, ...]``, START on the first
request and END on the last. ``simple_sequence`` (direct) answers ``START + INPUT`` for the START
request and echoes every later value; ``simple_dyna_sequence`` (oldest) also adds the correlation id
on the END request. The string-id run uses a UUID with ``simple_sequence`` (expects 21, then echo).
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpclient_aio
from tritonclient.utils import InferenceServerException

from tests.acceptance.example_repository import SHORT_IDLE_US, write_sequence_repository
from tests.acceptance.expectations import SEQUENCE_VALUES, sequence_expected
from tests.acceptance.server import ServerProcess, run_server

pytestmark = pytest.mark.embedded

MODELS = ["simple_sequence", "simple_dyna_sequence"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sequence-examples")
    write_sequence_repository(repo)
    with run_server(repo) as running:
        yield running


def _sequences(offset: int) -> list[tuple[int | str, list[int], int]]:
    """(sequence id, values sent, first value) of the examples' two integer sequences."""
    negated = [-v for v in SEQUENCE_VALUES]
    return [
        (1000 + offset * 2, [0, *SEQUENCE_VALUES], 0),
        (1001 + offset * 2, [100, *negated], 100),
    ]


def _expected(model: str, sequence_id: int | str, first: int, values: list[int]) -> list[int]:
    dyna = model == "simple_dyna_sequence"
    return sequence_expected(first, values[1:], corrid=int(sequence_id) if dyna else None)


def _sync_send(
    client: Any, module: Any, model: str, sequence_id: int | str, values: list[int]
) -> list[int]:
    results = []
    for count, value in enumerate(values, start=1):
        data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
        inputs = [module.InferInput("INPUT", data.shape, "INT32")]
        inputs[0].set_data_from_numpy(data)
        outputs = [module.InferRequestedOutput("OUTPUT")]
        result = client.infer(
            model_name=model,
            inputs=inputs,
            outputs=outputs,
            sequence_id=sequence_id,
            sequence_start=(count == 1),
            sequence_end=(count == len(values)),
        )
        results.append(int(result.as_numpy("OUTPUT")[0][0]))
    return results


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_sync_infer_client(
    protocol: str,
    model: str,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> None:
    client: Any = http if protocol == "http" else grpc
    module: Any = httpclient if protocol == "http" else grpcclient
    offset = MODELS.index(model) * 10 + (0 if protocol == "http" else 5)
    for sequence_id, values, first in _sequences(offset):
        got = _sync_send(client, module, model, sequence_id, values)
        assert got == _expected(model, sequence_id, first, values)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_sync_infer_client_string_sequence_id(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    client: Any = http if protocol == "http" else grpc
    module: Any = httpclient if protocol == "http" else grpcclient
    values = [20] + [-v for v in SEQUENCE_VALUES]
    got = _sync_send(client, module, "simple_sequence", str(uuid.uuid4()), values)
    assert got == [21] + values[1:]


@pytest.mark.parametrize("model", MODELS)
def test_grpc_sequence_stream_infer_client(
    model: str, grpc: grpcclient.InferenceServerClient
) -> None:
    completed: queue.Queue[Any] = queue.Queue()

    def callback(user_data: queue.Queue[Any], result: Any, error: Any) -> None:
        user_data.put(error if error else result)

    sequences = _sequences(100 + MODELS.index(model) * 10)
    string_id = str(uuid.uuid4())
    string_values = [20] + [-v for v in SEQUENCE_VALUES]
    grpc.start_stream(callback=partial(callback, completed))
    try:
        sends = [(sid, model, values) for sid, values, _ in sequences]
        sends.append((string_id, "simple_sequence", string_values))
        for sequence_id, target, values in sends:
            for count, value in enumerate(values, start=1):
                data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
                inputs = [grpcclient.InferInput("INPUT", data.shape, "INT32")]
                inputs[0].set_data_from_numpy(data)
                grpc.async_stream_infer(
                    model_name=target,
                    inputs=inputs,
                    outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                    request_id=f"{sequence_id}_{count}",
                    sequence_id=sequence_id,
                    sequence_start=(count == 1),
                    sequence_end=(count == len(values)),
                )
        received: dict[str, list[int]] = {str(sid): [] for sid, _, _ in sends}
        for _ in range(sum(len(values) for _, _, values in sends)):
            item = completed.get(timeout=30)
            assert not isinstance(item, InferenceServerException), item
            this_id = item.get_response().id.rsplit("_", 1)[0]
            received[this_id].append(int(item.as_numpy("OUTPUT")[0][0]))
    finally:
        grpc.stop_stream()
    for sequence_id, values, first in sequences:
        assert received[str(sequence_id)] == _expected(model, sequence_id, first, values)
    assert received[string_id] == [21] + string_values[1:]


@pytest.mark.parametrize("model", MODELS)
async def test_grpc_aio_sequence_stream_infer_client(model: str, server: ServerProcess) -> None:
    sequences = _sequences(200 + MODELS.index(model) * 10)

    async def requests() -> Any:
        for sequence_id, values, _ in sequences:
            for count, value in enumerate(values, start=1):
                data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
                inputs = [grpcclient.InferInput("INPUT", data.shape, "INT32")]
                inputs[0].set_data_from_numpy(data)
                yield {
                    "model_name": model,
                    "inputs": inputs,
                    "outputs": [grpcclient.InferRequestedOutput("OUTPUT")],
                    "request_id": f"{sequence_id}_{count}",
                    "sequence_id": sequence_id,
                    "sequence_start": count == 1,
                    "sequence_end": count == len(values),
                }

    expected_count = sum(len(values) for _, values, _ in sequences)
    received: dict[str, list[int]] = {str(sid): [] for sid, _, _ in sequences}
    async with grpcclient_aio.InferenceServerClient(url=server.grpc) as client:
        seen = 0
        async for result, error in client.stream_infer(inputs_iterator=requests()):
            assert error is None, error
            this_id = result.get_response().id.rsplit("_", 1)[0]
            received[this_id].append(int(result.as_numpy("OUTPUT")[0][0]))
            seen += 1
            if seen == expected_count:
                break
    for sequence_id, values, first in sequences:
        assert received[str(sequence_id)] == _expected(model, sequence_id, first, values)


async def _aio_sync_send(
    client: Any, module: Any, model: str, sequence_id: int | str, values: list[int]
) -> list[int]:
    results = []
    for count, value in enumerate(values, start=1):
        data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
        inputs = [module.InferInput("INPUT", data.shape, "INT32")]
        inputs[0].set_data_from_numpy(data)
        result = await client.infer(
            model_name=model,
            inputs=inputs,
            outputs=[module.InferRequestedOutput("OUTPUT")],
            sequence_id=sequence_id,
            sequence_start=(count == 1),
            sequence_end=(count == len(values)),
        )
        results.append(int(result.as_numpy("OUTPUT")[0][0]))
    return results


@pytest.mark.parametrize("model", MODELS)
async def test_http_aio_sequence_sync_infer_client(model: str, server: ServerProcess) -> None:
    async with httpclient_aio.InferenceServerClient(url=server.http) as client:
        for sequence_id, values, first in _sequences(300 + MODELS.index(model) * 10):
            got = await _aio_sync_send(client, httpclient, model, sequence_id, values)
            assert got == _expected(model, sequence_id, first, values)


@pytest.mark.parametrize("model", MODELS)
async def test_grpc_aio_sequence_sync_infer_client(model: str, server: ServerProcess) -> None:
    async with grpcclient_aio.InferenceServerClient(url=server.grpc) as client:
        for sequence_id, values, first in _sequences(400 + MODELS.index(model) * 10):
            got = await _aio_sync_send(client, grpcclient, model, sequence_id, values)
            assert got == _expected(model, sequence_id, first, values)


# ------------------------------------------------ L0_sequence_batcher error cases (§5.3 messages)


@pytest.mark.parametrize("model", MODELS)
def test_sequence_model_requires_a_correlation_id(
    model: str, http: httpclient.InferenceServerClient
) -> None:
    inputs = [httpclient.InferInput("INPUT", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.ones((1, 1), dtype=np.int32))
    with pytest.raises(InferenceServerException) as caught:
        http.infer(model, inputs)
    assert "must specify a non-zero or non-empty correlation ID" in caught.value.message()


@pytest.mark.parametrize("model", MODELS)
def test_sequence_without_start_is_refused(
    model: str, grpc: grpcclient.InferenceServerClient
) -> None:
    inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
    inputs[0].set_data_from_numpy(np.ones((1, 1), dtype=np.int32))
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer(model_name=model, inputs=inputs, sequence_id=987654)
    assert "must specify the START flag on the first request of the sequence" in (
        caught.value.message()
    )


def test_idle_sequence_is_released_and_needs_a_new_start(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    """L0_sequence_batcher: after max_sequence_idle_microseconds the sequence is gone."""
    model, sequence_id = "simple_sequence_idle", 5555

    def send(value: int, *, start: bool = False, end: bool = False) -> int:
        inputs = [grpcclient.InferInput("INPUT", [1, 1], "INT32")]
        inputs[0].set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
        result = grpc.infer(
            model_name=model, inputs=inputs, sequence_id=sequence_id,
            sequence_start=start, sequence_end=end,
        )  # fmt: skip
        return int(result.as_numpy("OUTPUT")[0][0])

    assert send(0, start=True) == 1
    assert send(5) == 5
    time.sleep(SHORT_IDLE_US / 1e6 * 2.5)
    with pytest.raises(InferenceServerException) as caught:
        send(7)
    assert "must specify the START flag on the first request of the sequence" in (
        caught.value.message()
    )
    assert send(0, start=True) == 1
    assert send(1, end=True) == 1
