"""Bodies larger than ``PREALLOCATE_AFTER``, in every framing a client may use, arrive whole and
answer exactly: the paths that keep whole-body copies off the event loop (a preallocated buffer
for a declared length, a join on a worker thread for chunked bodies, (de)compression on a worker
thread, outputs sent from their own memory) change where bytes go, never which bytes."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from repository import demo_models as dm
from serving.main import ServingProcess
from serving.protocol.http.body import PREALLOCATE_AFTER, BodyBuffer
from tests.serving.harness import HTTP_WORKER_IDS, HTTP_WORKERS, serving

pytestmark = pytest.mark.embedded

LARGE = 3 * PREALLOCATE_AFTER  # past every threshold, small enough for a quick test
CHUNK = 64 * 1024


@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=HTTP_WORKER_IDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    with serving(repo, http_workers=request.param) as process:
        yield process


def random_tensor() -> np.ndarray:  # type: ignore[type-arg]
    # NOTE: random, so that gzip cannot shrink it under the threshold either.
    return np.random.default_rng(7).random((1, LARGE // 4), dtype=np.float32)


def binary_request(x: np.ndarray) -> tuple[bytes, bytes]:  # type: ignore[type-arg]
    header = json.dumps({"inputs": [{"name": "INPUT0", "shape": list(x.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "OUTPUT0",
                                      "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    return header, x.tobytes()


def post(
    server: ServingProcess, body: bytes | Iterator[bytes], headers: dict[str, str], **kw: bool
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=60)
    try:
        connection.request("POST", "/v2/models/identity/infer", body=body, headers=headers, **kw)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def output_of(headers: dict[str, str], payload: bytes) -> np.ndarray:  # type: ignore[type-arg]
    header_length = int(headers["inference-header-content-length"])
    header = json.loads(payload[:header_length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == LARGE
    return np.frombuffer(payload[header_length:], dtype=np.float32).reshape(1, -1)


def test_a_large_body_with_its_length_declared_comes_back_exactly(server: ServingProcess) -> None:
    x = random_tensor()
    header, data = binary_request(x)
    status, headers, payload = post(
        server, header + data, {"Inference-Header-Content-Length": str(len(header))}
    )
    assert status == 200, payload[:200]
    np.testing.assert_array_equal(output_of(headers, payload), x)


def test_a_large_chunked_body_comes_back_exactly(server: ServingProcess) -> None:
    x = random_tensor()
    header, data = binary_request(x)
    whole = header + data
    pieces = (whole[i : i + CHUNK] for i in range(0, len(whole), CHUNK))
    status, headers, payload = post(
        server, pieces, {"Inference-Header-Content-Length": str(len(header))}, encode_chunked=True
    )
    assert status == 200, payload[:200]
    np.testing.assert_array_equal(output_of(headers, payload), x)


def test_a_large_gzip_body_and_answer_come_back_exactly(server: ServingProcess) -> None:
    x = random_tensor()
    header, data = binary_request(x)
    compressed = gzip.compress(header + data, compresslevel=1)
    assert len(compressed) > PREALLOCATE_AFTER
    status, headers, payload = post(server, compressed, {
        "Inference-Header-Content-Length": str(len(header)), "Content-Encoding": "gzip",
        "Accept-Encoding": "gzip"})  # fmt: skip
    assert status == 200, payload[:200]
    assert headers["content-encoding"] == "gzip"
    np.testing.assert_array_equal(output_of(headers, gzip.decompress(payload)), x)


def test_a_large_binary_body_without_its_header_length_gets_tritons_answer(
    server: ServingProcess,
) -> None:
    header, data = binary_request(random_tensor())
    status, _, payload = post(server, header + data, {})
    assert status == 400
    assert "Infer-Header-Content-Length" in json.loads(payload)["error"]


def gathered(declared: int | None, pieces: list[bytes]) -> bytes | bytearray | memoryview:
    async def gather() -> bytes | bytearray | memoryview:
        buffer = BodyBuffer(declared)
        for piece in pieces:
            buffer.add(piece)
        return await buffer.result()

    return asyncio.run(gather())


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("size", [10, PREALLOCATE_AFTER, PREALLOCATE_AFTER + 1, LARGE + 5])
def test_body_buffer_gives_back_exactly_the_bytes_it_was_given(declared: bool, size: int) -> None:
    whole = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    pieces = [whole[i : i + CHUNK - 1] for i in range(0, size, CHUNK - 1)]
    body = gathered(size if declared else None, pieces)
    assert bytes(body) == whole
    # A declared body past the threshold is one preallocated buffer: no bytes object to join.
    assert isinstance(body, memoryview) == (declared and size > PREALLOCATE_AFTER)
