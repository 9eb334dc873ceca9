"""Black-box checks ported from Triton's server QA suites (``server/qa``).

``L0_http/http_test.py`` (raw binary requests, JSON depth, duplicate outputs, bad
``Inference-Header-Content-Length``), ``L0_infer_zero`` (zero-size tensors), ``L0_optional_input``,
``L0_batcher`` (preferred batch size, read back through statistics) and ``L0_model_queue``
(``max_queue_size`` -> 503, queue timeout).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import gevent
import grpc as grpc_lib
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.acceptance.qa_repository import BATCHER_DELAY_US, write_qa_repository
from tests.acceptance.server import ServerProcess, run_server

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("server-qa")
    write_qa_repository(repo)
    with run_server(repo) as running:
        yield running


class RawResponse:
    """Status, headers and body of one plain HTTP exchange."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def error(self) -> str:
        return str(json.loads(self.body).get("error", ""))


def post(
    server: ServerProcess, path: str, body: bytes, headers: dict[str, str] | None = None
) -> RawResponse:
    host, port = server.http.rsplit(":", 1)
    connection = HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        lowered = {key.lower(): value for key, value in response.getheaders()}
        return RawResponse(response.status, lowered, response.read())
    finally:
        connection.close()


def post_json(server: ServerProcess, model: str, payload: dict[str, Any]) -> RawResponse:
    return post(
        server,
        f"/v2/models/{model}/infer",
        json.dumps(payload).encode(),
        {"Content-Type": "application/json"},
    )


def is_live(server: ServerProcess) -> bool:
    with httpclient.InferenceServerClient(url=server.http) as client:
        return bool(client.is_server_live())


# ------------------------------------------------------------------- L0_http: raw binary requests


@pytest.mark.parametrize("count", [8, 32])
def test_raw_binary_request(server: ServerProcess, count: int) -> None:
    """``Inference-Header-Content-Length: 0`` and a body of only tensor bytes (test_raw_binary)."""
    input_bytes = np.arange(count, dtype=np.float32).tobytes()
    response = post(
        server,
        "/v2/models/onnx_zero_1_float32/infer",
        input_bytes,
        {"Inference-Header-Content-Length": "0"},
    )
    assert response.status == 200, response.body
    header_size = int(response.headers["inference-header-content-length"])
    assert response.body[header_size:] == input_bytes


def test_raw_binary_bytes_with_one_element(server: ServerProcess) -> None:
    response = post(
        server,
        "/v2/models/onnx_zero_1_object_1_element/infer",
        b"427",
        {"Inference-Header-Content-Length": "0"},
    )
    assert response.status == 200, response.body
    header_size = int(response.headers["inference-header-content-length"])
    # BYTES come back length-prefixed.
    assert response.body[header_size + 4 :] == b"427"


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (
            "onnx_zero_1_object",
            b"427",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            "onnx_zero_1_float16",
            np.ones([2, 2], dtype=np.float16).tobytes(),
            "The shape of the raw input 'INPUT0' can not be deduced because there are more than "
            "one variable-sized dimension",
        ),
        (
            "onnx_zero_3_float32",
            np.arange(24, dtype=np.float32).tobytes(),
            "Raw request must only have 1 input (found 1) to be deduced but got 3 inputs in",
        ),
    ],
    ids=["bytes-not-shape-1", "two-variable-dims", "three-inputs"],
)
def test_raw_binary_request_refused_when_shape_cannot_be_deduced(
    server: ServerProcess, model: str, body: bytes, message: str
) -> None:
    response = post(
        server, f"/v2/models/{model}/infer", body, {"Inference-Header-Content-Length": "0"}
    )
    assert response.status == 400
    assert message in response.error()


def test_chunked_raw_binary_request(server: ServerProcess) -> None:
    """test_content_encoding_chunked_manually: a chunk-encoded body is decoded by the server."""
    input_bytes = np.arange(8, dtype=np.float32).tobytes()
    chunked = f"{len(input_bytes):X}\r\n".encode() + input_bytes + b"\r\n0\r\n\r\n"
    response = post(
        server,
        "/v2/models/onnx_zero_1_float32/infer",
        chunked,
        {"Inference-Header-Content-Length": "0", "Transfer-Encoding": "chunked"},
    )
    assert response.status == 200, response.body
    header_size = int(response.headers["inference-header-content-length"])
    assert response.body[header_size:] == input_bytes


# ----------------------------------------------------------- L0_http: JSON depth, duplicate outputs


@pytest.mark.parametrize(
    ("model", "datatype", "value"),
    [("simple_identity", "BYTES", '"hello"'), ("simple_identity_int64", "INT64", "123")],
)
@pytest.mark.parametrize(("depth", "accepted"), [(50, True), (120, False)])
def test_json_recursion_depth_limit(
    server: ServerProcess, model: str, datatype: str, value: str, depth: int, accepted: bool
) -> None:
    nested = value
    for _ in range(depth):
        nested = f"[{nested}]"
    body = (
        f'{{"inputs":[{{"name":"INPUT0","datatype":"{datatype}","shape":[1,1],"data":{nested}}}]}}'
    ).encode()
    response = post(server, f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
    if accepted:
        assert response.status == 200, response.body
    else:
        assert response.status == 400
        assert "JSON nesting depth exceeds maximum allowed limit (100)" in response.error()


def test_duplicate_output_names_are_refused(server: ServerProcess) -> None:
    payload = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [1, 8],
                "data": [np.arange(8, dtype=np.float32).tolist()],
            }
        ],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}],
    }
    response = post_json(server, "onnx_zero_1_float32", payload)
    assert response.status == 400
    # PROTOCOL §1.2 keeps Triton's older wording; newer Triton says "Duplicate output name ...".
    assert "OUTPUT0" in response.error()
    assert is_live(server)


@pytest.mark.parametrize("header_value", ["-1", "100000", "abc", "12.5", ""])
def test_bad_inference_header_content_length_is_a_400(
    server: ServerProcess, header_value: str
) -> None:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 2],
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }  # fmt: skip
    ).encode()
    body = header + np.ones(2, dtype=np.float32).tobytes()
    response = post(
        server,
        "/v2/models/onnx_zero_1_float32/infer",
        body,
        {"Inference-Header-Content-Length": header_value, "Content-Type": "application/json"},
    )
    assert response.status == 400, response.body
    assert response.error()
    assert is_live(server)


def test_binary_inputs_without_header_length_are_a_400(server: ServerProcess) -> None:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 2],
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }  # fmt: skip
    ).encode()
    response = post(
        server,
        "/v2/models/onnx_zero_1_float32/infer",
        header + np.ones(2, dtype=np.float32).tobytes(),
        {"Content-Type": "application/json"},
    )
    assert response.status == 400


def test_negative_dimension_is_refused(server: ServerProcess) -> None:
    payload = {"inputs": [{"name": "INPUT0", "shape": [2, -5], "datatype": "FP32", "data": [1.0]}]}
    response = post_json(server, "onnx_zero_1_float32", payload)
    assert response.status == 500  # Triton's quirk, kept by PROTOCOL §1.2
    assert "Unable to parse 'shape'" in response.error()


# --------------------------------------------------------------- L0_infer_zero: zero-size tensors


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("onnx_zero_1_float32", [1, 0]),
        ("onnx_zero_1_float32", [4, 0]),
        ("onnx_nobatch_zero_1_float32", [0]),
    ],  # fmt: skip
)
def test_http_zero_size_tensors(
    http: httpclient.InferenceServerClient, model: str, shape: list[int], binary: bool
) -> None:
    data = np.zeros(shape, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", shape, "FP32")]
    inputs[0].set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = http.infer(model, inputs, outputs=outputs)
    output = result.as_numpy("OUTPUT0")
    assert output is not None
    assert list(output.shape) == shape
    assert result.get_output("OUTPUT0")["shape"] == shape


@pytest.mark.parametrize(
    ("model", "shape", "datatype"),
    [
        ("onnx_zero_1_float32", [2, 0], "FP32"),
        ("onnx_nobatch_zero_1_float32", [0], "FP32"),
        ("onnx_zero_1_object", [1, 0], "BYTES"),
    ],  # fmt: skip
)
def test_grpc_zero_size_tensors(
    grpc: grpcclient.InferenceServerClient, model: str, shape: list[int], datatype: str
) -> None:
    dtype: Any = np.float32 if datatype == "FP32" else np.object_
    inputs = [grpcclient.InferInput("INPUT0", shape, datatype)]
    inputs[0].set_data_from_numpy(np.zeros(shape, dtype=dtype))
    result = grpc.infer(model_name=model, inputs=inputs)
    output = result.as_numpy("OUTPUT0")
    assert output is not None
    assert list(output.shape) == shape


# ------------------------------------------------------------------------- L0_optional_input


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_optional_input_may_be_omitted(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    value = np.arange(4, dtype=np.float32).reshape(1, 4)
    only_required = [module.InferInput("INPUT0", [1, 4], "FP32")]
    only_required[0].set_data_from_numpy(value)
    result = client.infer("optional_identity", only_required)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), value)

    both = [
        module.InferInput("INPUT0", [1, 4], "FP32"),
        module.InferInput("INPUT1", [1, 4], "FP32"),
    ]
    both[0].set_data_from_numpy(value)
    both[1].set_data_from_numpy(value)
    result = client.infer("optional_identity", both)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), value * 2)


def test_required_input_may_not_be_omitted(http: httpclient.InferenceServerClient) -> None:
    inputs = [httpclient.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as caught:
        http.infer("optional_identity", inputs)
    assert "INPUT0" in caught.value.message()


# -------------------------------------------------------- L0_batcher: preferred batch size, stats


def _sleep_inputs(rows: int = 1) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", [rows, 2], "FP32")]
    inputs[0].set_data_from_numpy(np.ones((rows, 2), dtype=np.float32))
    return inputs


def _stats(http: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    stats: dict[str, Any] = http.get_inference_statistics(model_name=model)["model_stats"][0]
    return stats


def test_dynamic_batcher_sends_preferred_batch_and_waits_for_delay_otherwise(
    http: httpclient.InferenceServerClient,
) -> None:
    model = "batcher_preferred"
    before = _stats(http, model)
    preferred = [http.async_infer(model, _sleep_inputs()) for _ in range(4)]
    sizes = [int(p.get_result().as_numpy("BATCH_SIZE")[0][0]) for p in preferred]
    assert sizes == [4, 4, 4, 4]

    started = time.monotonic()
    partial = [http.async_infer(model, _sleep_inputs()) for _ in range(3)]
    sizes = [int(p.get_result().as_numpy("BATCH_SIZE")[0][0]) for p in partial]
    assert sizes == [3, 3, 3]
    # Held for max_queue_delay_microseconds (a little less: timer granularity).
    assert time.monotonic() - started >= 0.8 * BATCHER_DELAY_US / 1e6

    after = _stats(http, model)
    assert after["execution_count"] - before["execution_count"] == 2
    assert after["inference_count"] - before["inference_count"] == 7
    batch_counts = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
    assert batch_counts.get(4, 0) >= 1 and batch_counts.get(3, 0) >= 1


# --------------------------------------------------------------------- L0_model_queue / L0_http 503


# The first request holds the only instance for BLOCKING_DELAY_MS (a request parameter the sleep
# model honours); the margins are wide so a loaded 2-core CI machine still sees the same order.
BLOCKING_DELAY_MS = 3000


def _block_instance(http: httpclient.InferenceServerClient, model: str) -> Any:
    blocking = http.async_infer(
        model, _sleep_inputs(), parameters={"execute_delay_ms": BLOCKING_DELAY_MS}
    )
    # NOTE: gevent's sleep, not time's: the client sends from a greenlet, which runs only while
    # this thread waits in gevent. With time.sleep the request went out together with the later
    # ones, in no set order, and a loaded machine could run a later one first.
    gevent.sleep(0.5)
    return blocking


def _outcome(request: Any) -> InferenceServerException | None:
    try:
        request.get_result()
    except InferenceServerException as exc:
        return exc
    return None


def test_queue_full_request_is_rejected_with_503(http: httpclient.InferenceServerClient) -> None:
    """max_queue_size 1: with the instance busy and one request queued, the next gets 503."""
    model = "queue_max_1"
    blocking = _block_instance(http, model)
    later = [http.async_infer(model, _sleep_inputs()) for _ in range(2)]
    errors = [error for error in map(_outcome, later) if error is not None]
    assert _outcome(blocking) is None
    assert errors, "no request was refused although the queue holds one"
    for error in errors:
        assert error.status() == "503"
        assert "Exceeds maximum queue size" in error.message()


def test_queue_timeout_rejects_with_503(http: httpclient.InferenceServerClient) -> None:
    """default_timeout_microseconds 1 s with REJECT: a request stuck behind a 3 s one gets 503."""
    model = "queue_timeout"
    blocking = _block_instance(http, model)
    error = _outcome(http.async_infer(model, _sleep_inputs()))
    assert _outcome(blocking) is None
    assert error is not None, "the queued request outlived its queue timeout"
    assert error.status() == "503"
    assert "Request timeout expired" in error.message()


def test_dynamic_batcher_never_merges_different_shapes(
    http: httpclient.InferenceServerClient,
) -> None:
    """L0_batcher variable-shape cases: requests whose [-1] dims differ are batched apart."""
    model = "batcher_preferred"
    pending = []
    for width in (2, 3, 2, 3):
        inputs = [httpclient.InferInput("INPUT0", [1, width], "FP32")]
        inputs[0].set_data_from_numpy(np.full((1, width), width, dtype=np.float32))
        pending.append((width, http.async_infer(model, inputs)))
    for width, request in pending:
        result = request.get_result()
        output = result.as_numpy("OUTPUT0")
        assert output is not None
        np.testing.assert_array_equal(output, np.full((1, width), width, dtype=np.float32))
        assert int(result.as_numpy("BATCH_SIZE")[0][0]) <= 2


# ------------------------------------------------ client deadlines (simple_grpc_infer_client -t)


def test_grpc_client_timeout_expires_as_deadline_exceeded(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    """``client_timeout`` shorter than the model's execution: the client sees Deadline Exceeded."""
    inputs = [grpcclient.InferInput("INPUT0", [2], "FP32")]
    inputs[0].set_data_from_numpy(np.ones(2, dtype=np.float32))
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer(
            model_name="slow", inputs=inputs, client_timeout=0.2,
            parameters={"execute_delay_ms": 1000},
        )  # fmt: skip
    assert "Deadline Exceeded" in caught.value.message()
    result = grpc.infer(model_name="slow", inputs=inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones(2, dtype=np.float32))


# ------------------------------------------------------------ L0_parameters: custom parameters


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_custom_parameters_reach_the_model(
    protocol: str, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    module: Any = httpclient if protocol == "http" else grpcclient
    client: Any = http if protocol == "http" else grpc
    inputs = [module.InferInput("INPUT0", [1], "FP32")]
    inputs[0].set_data_from_numpy(np.ones(1, dtype=np.float32))
    sent = {"bool_key": True, "int_key": 7, "str_key": "value", "double_key": 1.5}
    result = client.infer("parameter", inputs, parameters=sent)
    output = result.as_numpy("OUTPUT0")
    assert output is not None
    echoed = output[0].decode() if isinstance(output[0], bytes) else output[0]
    assert json.loads(echoed) == sent


def test_reserved_triton_parameter_is_refused(server: ServerProcess) -> None:
    """tritonclient refuses ``triton_*`` keys itself, so send them raw, as other clients could."""
    payload = {
        "parameters": {"triton_custom": "x"},
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}],
    }
    response = post_json(server, "parameter", payload)
    assert response.status == 400
    assert "parameter keys starting with 'triton_' are reserved" in response.error()

    request = service_pb2.ModelInferRequest(model_name="parameter")
    request.parameters["triton_custom"].string_param = "x"
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    with (
        grpc_lib.insecure_channel(server.grpc) as channel,
        pytest.raises(grpc_lib.RpcError) as caught,
    ):
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert caught.value.code() == grpc_lib.StatusCode.INVALID_ARGUMENT
    assert "parameter keys starting with 'triton_' are reserved" in str(caught.value.details())


# ----------------------------------------------------- L0_server_status: versions and their stats


def test_version_policy_versions_metadata_and_per_version_statistics(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    model = "onnx_int32_int32_int32"
    assert sorted(http.get_model_metadata(model)["versions"]) == ["1", "3"]
    assert http.is_model_ready(model, "1") and http.is_model_ready(model, "3")
    assert not http.is_model_ready(model, "2")
    with pytest.raises(InferenceServerException) as caught:
        grpc.get_model_metadata(model, model_version="2")
    assert "version 2" in caught.value.message()

    def success(version: str) -> int:
        stats = http.get_inference_statistics(model_name=model, model_version=version)
        return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])

    before = {v: success(v) for v in ("1", "3")}
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    assert http.infer(model, inputs).get_response()["model_version"] == "3"  # highest by default
    assert http.infer(model, inputs, model_version="1").get_response()["model_version"] == "1"
    http.infer(model, inputs, model_version="1")
    assert success("1") - before["1"] == 2
    assert success("3") - before["3"] == 1
    all_versions = http.get_inference_statistics(model_name=model)["model_stats"]
    assert sorted(entry["version"] for entry in all_versions) == ["1", "3"]
