"""Triton's Python client examples (``client/src/python/examples``), ported as tests.

Each test does what the named example does, with the same client calls and the same checks,
against ``simple`` (INT32 add/sub), ``simple_string``, ``simple_identity`` and the python_backend
``add_sub``. The whole suite runs twice: against a server in clear text ("plain") and against one
whose every listener speaks TLS ("tls"), with unmodified tritonclient and ``ssl=True`` (see
``tests/acceptance/clients.py``). gRPC's mutual TLS has its own server and examples at the end.
"""

from __future__ import annotations

import asyncio
import http.client as http_lib
import queue
import urllib.request
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import (
    InferenceServerException,
    deserialize_bytes_tensor,
    np_to_triton_dtype,
)

from repository import demo_models as dm
from tests.acceptance import clients
from tests.acceptance.example_repository import write_client_examples_repository
from tests.acceptance.expectations import assert_add_sub, simple_data
from tests.acceptance.server import ServerProcess, run_server
from tests.certificates import Pki

pytestmark = pytest.mark.embedded

MODEL = "simple"


@pytest.fixture(scope="module", params=["plain", "tls"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("client-examples")
    write_client_examples_repository(repo)
    with run_server(repo, pki=pki if request.param == "tls" else None) as running:
        yield running


def _http_inputs(
    input0: np.ndarray[Any, Any], input1: np.ndarray[Any, Any], *, binary0: bool, binary1: bool
) -> list[httpclient.InferInput]:
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(input0, binary_data=binary0)
    inputs[1].set_data_from_numpy(input1, binary_data=binary1)
    return inputs


def _grpc_inputs(
    input0: np.ndarray[Any, Any], input1: np.ndarray[Any, Any]
) -> list[grpcclient.InferInput]:
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    return inputs


# ------------------------------------------------------------ which protocol the suite runs over


def test_a_client_of_the_other_kind_gets_nothing(server: ServerProcess) -> None:
    """Over TLS a clear-text client is turned away, and the reverse: the suite's answers came over
    the protocol its name says."""
    other_scheme = "http" if server.pki else "https"
    with pytest.raises((OSError, http_lib.HTTPException)):
        urllib.request.urlopen(f"{other_scheme}://{server.http}/v2/health/live", timeout=10)
    with (
        grpcclient.InferenceServerClient(server.grpc, ssl=not server.pki) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.is_server_live(client_timeout=10)
    assert caught.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


# ----------------------------------------------------------------- simple_http_infer_client.py


def test_http_infer_client_mixed_json_and_binary_tensors(
    http: httpclient.InferenceServerClient,
) -> None:
    input0, _ = simple_data()
    input1 = np.full(shape=(1, 16), fill_value=-1, dtype=np.int32)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    results = http.infer(
        MODEL,
        _http_inputs(input0, input1, binary0=False, binary1=True),
        outputs=outputs,
        query_params={"test_1": 1, "test_2": 2},
    )
    assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))
    response = results.get_response()
    assert response["model_name"] == MODEL
    assert response["model_version"] == "1"
    by_name = {output["name"]: output for output in response["outputs"]}
    assert "binary_data_size" in by_name["OUTPUT0"].get("parameters", {})
    assert by_name["OUTPUT1"]["data"] == list(range(1, 17))

    statistics = http.get_inference_statistics(model_name=MODEL)
    assert len(statistics["model_stats"]) == 1


def test_http_infer_client_without_requested_outputs_returns_all(
    http: httpclient.InferenceServerClient,
) -> None:
    input0, input1 = simple_data()
    results = http.infer(
        MODEL,
        _http_inputs(input0, input1, binary0=False, binary1=True),
        outputs=None,
        query_params={"test_1": 1, "test_2": 2},
    )
    assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_http_infer_client_with_request_and_response_compression(
    http: httpclient.InferenceServerClient, algorithm: str
) -> None:
    input0, input1 = simple_data()
    results = http.infer(
        MODEL,
        _http_inputs(input0, input1, binary0=False, binary1=True),
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
        ],
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


def test_http_infer_client_unknown_model_message(http: httpclient.InferenceServerClient) -> None:
    input0, input1 = simple_data()
    with pytest.raises(InferenceServerException) as caught:
        http.infer("wrong_model_name", _http_inputs(input0, input1, binary0=False, binary1=True))
    assert caught.value.message().startswith("Request for unknown model")


# ----------------------------------------------------------------- simple_grpc_infer_client.py


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_grpc_infer_client(grpc: grpcclient.InferenceServerClient, compression: str | None) -> None:
    _grpc_infer_example(grpc, compression)


def _grpc_infer_example(grpc: grpcclient.InferenceServerClient, compression: str | None) -> None:
    input0, input1 = simple_data()
    outputs = [
        grpcclient.InferRequestedOutput("OUTPUT0"),
        grpcclient.InferRequestedOutput("OUTPUT1"),
    ]
    results = grpc.infer(
        model_name=MODEL,
        inputs=_grpc_inputs(input0, input1),
        outputs=outputs,
        client_timeout=10.0,
        headers={"test": "1"},
        compression_algorithm=compression,
    )
    assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))
    statistics = grpc.get_inference_statistics(model_name=MODEL)
    assert len(statistics.model_stats) == 1


def test_grpc_infer_client_without_requested_outputs_returns_all(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    input0, input1 = simple_data()
    results = grpc.infer(model_name=MODEL, inputs=_grpc_inputs(input0, input1))
    assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


def test_grpc_infer_client_unknown_model_message(grpc: grpcclient.InferenceServerClient) -> None:
    input0, input1 = simple_data()
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer(model_name="wrong_model_name", inputs=_grpc_inputs(input0, input1))
    assert caught.value.message().startswith("Request for unknown model")


# ------------------------------------------------------------ simple_{http,grpc}_async_infer_client


def test_http_async_infer_client(http: httpclient.InferenceServerClient) -> None:
    input0, input1 = simple_data()
    inputs = _http_inputs(input0, input1, binary0=False, binary1=True)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    pending = [
        http.async_infer(MODEL, inputs, request_id=str(i), outputs=outputs) for i in range(4)
    ]
    for request in pending:
        result = request.get_result()
        assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))


def test_grpc_async_infer_client_callbacks(grpc: grpcclient.InferenceServerClient) -> None:
    input0, input1 = simple_data()
    completed: queue.Queue[Any] = queue.Queue()

    def callback(user_data: queue.Queue[Any], result: Any, error: Any) -> None:
        user_data.put(error if error else result)

    outputs = [
        grpcclient.InferRequestedOutput("OUTPUT0"),
        grpcclient.InferRequestedOutput("OUTPUT1"),
    ]
    for i in range(4):
        grpc.async_infer(
            model_name=MODEL,
            inputs=_grpc_inputs(input0, input1),
            callback=partial(callback, completed),
            outputs=outputs,
            request_id=str(i),
        )
    ids = set()
    for _ in range(4):
        result = completed.get(timeout=30)
        assert not isinstance(result, InferenceServerException), result
        assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
        ids.add(result.get_response().id)
    assert ids == {"0", "1", "2", "3"}


# ------------------------------------------------------------- simple_{http,grpc}_aio_infer_client


async def test_http_aio_infer_client(server: ServerProcess) -> None:
    input0, input1 = simple_data()
    async with clients.http_aio_client(server) as client:
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready(MODEL)
        assert (await client.get_server_metadata())["name"] == "triton"
        assert (await client.get_model_metadata(MODEL))["name"] == MODEL
        assert (await client.get_model_config(MODEL))["max_batch_size"] == 8

        async def one() -> Any:
            inputs = _http_inputs(input0, input1, binary0=True, binary1=False)
            return await client.infer(MODEL, inputs)

        for result in await asyncio.gather(*(one() for _ in range(4))):
            assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
        statistics = await client.get_inference_statistics(model_name=MODEL)
        assert statistics["model_stats"][0]["name"] == MODEL


async def test_grpc_aio_infer_client_unary_and_stream(server: ServerProcess) -> None:
    input0, input1 = simple_data()
    async with clients.grpc_aio_client(server) as client:
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready(MODEL)
        assert (await client.get_server_metadata()).name == "triton"
        assert (await client.get_model_config(MODEL)).config.max_batch_size == 8

        results = await asyncio.gather(
            *(client.infer(MODEL, _grpc_inputs(input0, input1)) for _ in range(4))
        )
        for result in results:
            assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))

        async def requests() -> Any:
            for i in range(3):
                yield {"model_name": MODEL, "inputs": _grpc_inputs(input0, input1),
                       "request_id": str(i)}  # fmt: skip

        seen = []
        async for result, error in client.stream_infer(inputs_iterator=requests()):
            assert error is None, error
            assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
            seen.append(result.get_response().id)
            if len(seen) == 3:
                break
        assert sorted(seen) == ["0", "1", "2"]


# -------------------------------------------------------------- simple_{http,grpc}_health_metadata


def test_http_health_metadata(http: httpclient.InferenceServerClient) -> None:
    assert http.is_server_live()
    assert http.is_server_ready()
    assert http.is_model_ready(MODEL)
    assert http.get_server_metadata()["name"] == "triton"
    metadata = http.get_model_metadata(MODEL)
    assert metadata["name"] == MODEL
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    with pytest.raises(InferenceServerException) as caught:
        http.get_model_metadata("wrong_model_name")
    assert "Request for unknown model" in caught.value.message()


def test_grpc_health_metadata(grpc: grpcclient.InferenceServerClient) -> None:
    assert grpc.is_server_live()
    assert grpc.is_server_ready()
    assert grpc.is_model_ready(MODEL)
    assert grpc.get_server_metadata().name == "triton"
    assert grpc.get_server_metadata(as_json=True)["name"] == "triton"
    metadata = grpc.get_model_metadata(MODEL, model_version="1")
    assert metadata.name == MODEL
    assert [tensor.name for tensor in metadata.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert list(metadata.inputs[0].shape) == [-1, 16]
    assert grpc.get_model_config(MODEL).config.name == MODEL
    with pytest.raises(InferenceServerException) as caught:
        grpc.get_model_metadata("wrong_model_name")
    assert "Request for unknown model" in caught.value.message()


# ------------------------------------------------- simple_{http,grpc}_string_infer_client (BYTES)


def _string_data() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    in0 = np.arange(start=0, stop=16, dtype=np.int32)
    in1 = np.ones(shape=16, dtype=np.int32)
    as_strings = [
        np.expand_dims(np.array([str(x) for x in values], dtype=object), axis=0)
        for values in (in0, in1)
    ]
    return in0, as_strings[0], as_strings[1]


def test_http_string_infer_client(http: httpclient.InferenceServerClient) -> None:
    in0, in0n, in1n = _string_data()
    inputs = [
        httpclient.InferInput("INPUT0", in0n.shape, "BYTES"),
        httpclient.InferInput("INPUT1", in1n.shape, "BYTES"),
    ]
    inputs[0].set_data_from_numpy(in0n, binary_data=True)
    inputs[1].set_data_from_numpy(in1n, binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    results = http.infer("simple_string", inputs, outputs=outputs)
    output0, output1 = results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1")
    assert output0 is not None and output1 is not None
    assert [int(x) for x in output0[0]] == list(in0 + 1)
    assert [int(x) for x in output1[0]] == list(in0 - 1)


def test_grpc_string_infer_client(grpc: grpcclient.InferenceServerClient) -> None:
    in0, in0n, in1n = _string_data()
    inputs = [
        grpcclient.InferInput("INPUT0", in0n.shape, "BYTES"),
        grpcclient.InferInput("INPUT1", in1n.shape, "BYTES"),
    ]
    inputs[0].set_data_from_numpy(in0n)
    inputs[1].set_data_from_numpy(in1n)
    results = grpc.infer(model_name="simple_string", inputs=inputs)
    output0, output1 = results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1")
    assert output0 is not None and output1 is not None
    assert [int(x) for x in output0[0]] == list(in0 + 1)
    assert [int(x) for x in output1[0]] == list(in0 - 1)


def test_grpc_explicit_byte_content_client(server: ServerProcess) -> None:
    """``grpc_explicit_byte_content_client.py``: typed ``bytes_contents`` instead of raw bytes."""
    in0, in0n, in1n = _string_data()
    request = service_pb2.ModelInferRequest(model_name="simple_string", model_version="")
    for name, data in (("INPUT0", in0n), ("INPUT1", in1n)):
        tensor = request.inputs.add(name=name, datatype="BYTES", shape=[1, 16])
        tensor.contents.bytes_contents.extend(x.encode() for x in data[0])
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT1")
    with clients.grpc_channel(server) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert [output.name for output in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    # Triton always answers with raw_output_contents (BYTES length-prefixed), never typed contents.
    sums = deserialize_bytes_tensor(response.raw_output_contents[0])
    diffs = deserialize_bytes_tensor(response.raw_output_contents[1])
    assert [int(x) for x in sums] == list(in0 + 1)
    assert [int(x) for x in diffs] == list(in0 - 1)


def test_grpc_explicit_int_content_client(server: ServerProcess) -> None:
    """``grpc_explicit_int_content_client.py``: INT32 inputs as typed ``int_contents``."""
    input0, input1 = simple_data()
    request = service_pb2.ModelInferRequest(model_name=MODEL, model_version="")
    for name, data in (("INPUT0", input0), ("INPUT1", input1)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(int(x) for x in data[0])
    with clients.grpc_channel(server) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    outputs = {output.name: index for index, output in enumerate(response.outputs)}
    output0 = np.frombuffer(response.raw_output_contents[outputs["OUTPUT0"]], dtype=np.int32)
    output1 = np.frombuffer(response.raw_output_contents[outputs["OUTPUT1"]], dtype=np.int32)
    assert_add_sub(input0[0], input1[0], output0, output1)


def test_http_bytes_identity_python_model(http: httpclient.InferenceServerClient) -> None:
    """``simple_identity``: a Python model echoing BYTES, non-UTF-8 and empty elements too."""
    binary_data = np.array([[b"hello", b"", b"\x00\xff binary", "héllo".encode()]], dtype=object)
    json_data = np.array([[b"hello", b"", b"json text", "héllo".encode()]], dtype=object)
    for binary, data in ((True, binary_data), (False, json_data)):
        inputs = [httpclient.InferInput("INPUT0", data.shape, "BYTES")]
        inputs[0].set_data_from_numpy(data, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        result = http.infer("simple_identity", inputs, outputs=outputs)
        output = result.as_numpy("OUTPUT0")
        assert output is not None
        # tritonclient hands JSON BYTES outputs back as str, binary ones as bytes.
        expected = data if binary else np.vectorize(bytes.decode, otypes=[object])(data)
        assert output.tolist() == expected.tolist()


def test_grpc_bytes_identity_python_model(grpc: grpcclient.InferenceServerClient) -> None:
    data = np.array([[b"a"], [b"\x00\x01\x02"]], dtype=object)
    inputs = [grpcclient.InferInput("INPUT0", data.shape, "BYTES")]
    inputs[0].set_data_from_numpy(data)
    result = grpc.infer(model_name="simple_identity", inputs=inputs)
    output = result.as_numpy("OUTPUT0")
    assert output is not None
    assert output.tolist() == data.tolist()


# -------------------------------------------------------------------- reuse_infer_objects_client.py


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_reuse_infer_objects(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """The same InferInput/InferRequestedOutput objects serve several inferences with new data."""
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    inputs = [
        module.InferInput("INPUT0", [1, 16], "INT32"),
        module.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    base0, base1 = simple_data()
    for factor in (1, 2, 3):
        input0, input1 = base0 * factor, base1 * 2 * factor
        inputs[0].set_data_from_numpy(input0)
        inputs[1].set_data_from_numpy(input1)
        results = client.infer(model_name=MODEL, inputs=inputs, outputs=outputs)
        assert results.get_output("OUTPUT0") is not None
        assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


# --------------------------------------------- simple_grpc_custom_args_client / keepalive_client


def test_grpc_custom_channel_args_client(server: ServerProcess) -> None:
    channel_args = [
        ("grpc.max_send_message_length", 1024 * 1024),
        ("grpc.max_receive_message_length", 1024 * 1024),
        ("grpc.keepalive_time_ms", 2**31 - 1),
        ("grpc.keepalive_timeout_ms", 20000),
        ("grpc.keepalive_permit_without_calls", False),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.dns_enable_srv_queries", 1),
    ]
    with clients.grpc_client(server, channel_args=channel_args) as client:
        input0, input1 = simple_data()
        results = client.infer(
            model_name=MODEL, inputs=_grpc_inputs(input0, input1), headers={"test": "1"}
        )
        assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


def test_grpc_keepalive_client(server: ServerProcess) -> None:
    keepalive = grpcclient.KeepAliveOptions(
        keepalive_time_ms=2**31 - 1,
        keepalive_timeout_ms=20000,
        keepalive_permit_without_calls=False,
        http2_max_pings_without_data=2,
    )
    with clients.grpc_client(server, keepalive_options=keepalive) as client:
        input0, input1 = simple_data()
        results = client.infer(model_name=MODEL, inputs=_grpc_inputs(input0, input1))
        assert_add_sub(input0, input1, results.as_numpy("OUTPUT0"), results.as_numpy("OUTPUT1"))


# -------------------------------------------------- python_backend examples/add_sub/client.py


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_python_backend_add_sub_client(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    shape = [4]
    input0 = np.random.rand(*shape).astype(np.float32)
    input1 = np.random.rand(*shape).astype(np.float32)
    inputs = [
        module.InferInput("INPUT0", input0.shape, np_to_triton_dtype(input0.dtype)),
        module.InferInput("INPUT1", input1.shape, np_to_triton_dtype(input1.dtype)),
    ]
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    response = client.infer("add_sub", inputs, request_id=str(1), outputs=outputs)
    np.testing.assert_allclose(response.as_numpy("OUTPUT0"), input0 + input1, rtol=1e-6)
    np.testing.assert_allclose(response.as_numpy("OUTPUT1"), input0 - input1, rtol=1e-6)


# ------------------------------------------------------------------ statistics via the client API


def test_statistics_count_inferences_and_executions(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    def counts() -> tuple[int, int, int]:
        stats = http.get_inference_statistics(model_name=MODEL, model_version="1")["model_stats"][0]
        success = stats["inference_stats"]["success"]["count"]
        return stats["inference_count"], stats["execution_count"], success

    before = counts()
    input0, input1 = simple_data()
    batch0, batch1 = np.repeat(input0, 3, axis=0), np.repeat(input1, 3, axis=0)
    inputs = [
        httpclient.InferInput("INPUT0", [3, 16], "INT32"),
        httpclient.InferInput("INPUT1", [3, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(batch0)
    inputs[1].set_data_from_numpy(batch1)
    result = http.infer(MODEL, inputs)
    assert_add_sub(batch0, batch1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
    after = counts()
    assert after[0] - before[0] == 3  # inference_count is batch-expanded
    assert after[1] - before[1] == 1  # one execution
    assert after[2] - before[2] == 1  # one successful request

    grpc_stats = grpc.get_inference_statistics(model_name=MODEL, model_version="1")
    assert grpc_stats.model_stats[0].name == MODEL
    assert grpc_stats.model_stats[0].version == "1"
    assert grpc_stats.model_stats[0].inference_count >= after[0]
    everything = http.get_inference_statistics()
    assert {stat["name"] for stat in everything["model_stats"]} >= {
        MODEL,
        "add_sub",
        "simple_string",
    }


# ------------------------------------------ L0_server_status / L0_lifecycle: errors and none mode


def test_unknown_version_errors(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        http.get_model_metadata(MODEL, model_version="7")
    assert "version 7 is not found" in caught.value.message()
    with pytest.raises(InferenceServerException) as caught:
        grpc.get_model_metadata(MODEL, model_version="7")
    assert "version 7 is not found" in caught.value.message()
    assert not http.is_model_ready(MODEL, model_version="7")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_load_and_unload_refused_outside_explicit_mode(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    client: Any = http if protocol == "http" else grpc
    for call in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as caught:
            call(MODEL)
        assert "explicit model load / unload is not allowed if polling is enabled" in (
            caught.value.message()
        )
    assert client.is_model_ready(MODEL)


# ------------------------------------------------------------- Prometheus metrics (Triton's names)


def test_metrics_endpoint_counts_simple_requests(
    server: ServerProcess, http: httpclient.InferenceServerClient
) -> None:
    input0, input1 = simple_data()
    http.infer(MODEL, _http_inputs(input0, input1, binary0=True, binary1=True))
    text = clients.metrics_text(server)
    for family in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(family + "{") and 'model="simple"' in line and 'version="1"' in line
        ]
        assert values and values[0] >= 1, f"{family} for simple/1 missing or zero"


def test_grpc_standard_health_service(server: ServerProcess) -> None:
    """``grpc.health.v1.Health/Check`` (what Kubernetes gRPC probes call) answers SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with clients.grpc_channel(server) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


# ----------------------------------------- classification extension (image_client.py's class_count)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classification_class_count(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """``InferRequestedOutput(name, class_count=k)``: top-k "value:index" strings per batch item."""
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    input0, input1 = simple_data()  # OUTPUT0 = 1..16
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
              module.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(input0)
    inputs[1].set_data_from_numpy(input1)
    outputs = [module.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer(MODEL, inputs, outputs=outputs)
    classes = result.as_numpy("OUTPUT0")
    assert classes is not None
    assert classes.shape == (1, 3)
    decoded = [c.decode() if isinstance(c, bytes) else c for c in classes[0]]
    assert decoded == ["16:15", "15:14", "14:13"]


# ------------------------------- shared memory: not implemented, reported as such (PROTOCOL §2.6)


def test_shared_memory_is_reported_unsupported_and_not_advertised(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """The ``*_shm_client.py`` examples fail at their first call, with a clear status."""
    extensions = http.get_server_metadata()["extensions"]
    assert "system_shared_memory" not in extensions
    assert "cuda_shared_memory" not in extensions
    with pytest.raises(InferenceServerException) as caught:
        http.get_system_shared_memory_status()
    assert caught.value.status() == "501"
    with pytest.raises(InferenceServerException) as caught:
        grpc.unregister_system_shared_memory()
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert grpc.is_server_live()


# ------------------------------------------------------- gRPC mutual TLS (--grpc-use-ssl-mutual)


@pytest.fixture(scope="module")
def mutual_tls_server(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[ServerProcess]:
    """gRPC requires a client certificate signed by the CA; HTTP and metrics are HTTPS."""
    repo = tmp_path_factory.mktemp("mutual-tls-examples")
    dm.write_onnx_add_sub(repo, MODEL, dims=(16,), max_batch_size=8)
    with run_server(repo, pki=pki, grpc_mutual=True) as running:
        yield running


def test_grpc_infer_client_with_a_client_certificate(mutual_tls_server: ServerProcess) -> None:
    """``simple_grpc_infer_client.py`` given ``private_key`` and ``certificate_chain``."""
    with clients.grpc_client(mutual_tls_server) as client:
        _grpc_infer_example(client, compression="gzip")


async def test_grpc_aio_infer_client_with_a_client_certificate(
    mutual_tls_server: ServerProcess,
) -> None:
    input0, input1 = simple_data()
    async with clients.grpc_aio_client(mutual_tls_server) as client:
        assert await client.is_server_ready()
        result = await client.infer(MODEL, _grpc_inputs(input0, input1))
        assert_add_sub(input0, input1, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))


def test_mutual_tls_refuses_a_grpc_client_without_a_certificate(
    mutual_tls_server: ServerProcess,
) -> None:
    """The CA alone is not enough: the handshake fails, nothing reaches the model."""
    input0, input1 = simple_data()
    before = _inference_count(mutual_tls_server)
    with (
        clients.grpc_client(mutual_tls_server, with_certificate=False) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer(MODEL, _grpc_inputs(input0, input1), client_timeout=10)
    assert caught.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
    assert _inference_count(mutual_tls_server) == before


def _inference_count(server: ServerProcess) -> int:
    """``simple``'s inference count, read over HTTPS (mutual TLS is gRPC's only)."""
    client = clients.http_client(server)
    try:
        return int(client.get_inference_statistics(MODEL)["model_stats"][0]["inference_count"])
    finally:
        client.close()


async def test_mutual_tls_refuses_a_grpc_aio_client_without_a_certificate(
    mutual_tls_server: ServerProcess,
) -> None:
    async with clients.grpc_aio_client(mutual_tls_server, with_certificate=False) as client:
        with pytest.raises(InferenceServerException) as caught:
            await client.is_server_live(client_timeout=10)
    assert caught.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
