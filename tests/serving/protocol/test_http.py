"""KServe v2 over HTTP, driven by the real ``tritonclient.http`` client (and raw requests where the
client cannot send something malformed). After each error the server must keep serving."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import select
import socket
import struct
import time
import zlib
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from serving.main import ServingProcess
from serving.protocol.http.app import HELD_BODIES
from tests.serving.harness import identity_input
from tests.serving.protocol.conftest import MAX_REQUEST_BYTES

pytestmark = pytest.mark.embedded


@pytest.fixture
def client(server: ServingProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url)


def raw(
    server: ServingProcess,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def assert_still_serving(client: httpclient.InferenceServerClient) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = client.infer("identity", [identity_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def error_of(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


# -- health and metadata ----------------------------------------------------------------------


def test_health_live_and_ready_answer_200_with_empty_body(server: ServingProcess) -> None:
    for path in ("/v2/health/live", "/v2/health/ready"):
        status, _, body = raw(server, "GET", path)
        assert (status, body) == (200, b"")


def test_server_metadata_is_triton_with_only_implemented_extensions(client: Any) -> None:
    meta = client.get_server_metadata()
    assert meta["name"] == "triton"
    assert "binary_tensor_data" in meta["extensions"]
    assert "model_repository" in meta["extensions"]
    for missing in ("system_shared_memory", "cuda_shared_memory", "trace", "logging"):
        assert missing not in meta["extensions"]


def test_model_metadata_with_and_without_version(client: Any) -> None:
    meta = client.get_model_metadata("simple")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.get_model_metadata("versioned")["versions"] == ["1", "2"]
    assert client.get_model_metadata("versioned", "1")["versions"] == ["1"]


def test_model_ready_and_config(client: Any, server: ServingProcess) -> None:
    assert client.is_model_ready("simple")
    assert client.is_model_ready("versioned", "2")
    assert not client.is_model_ready("versioned", "7")
    status, _, body = raw(server, "GET", "/v2/models/versioned/versions/7/ready")
    assert status == 400 and json.loads(body) == {"error": "Model version not ready"}
    config = client.get_model_config("simple")
    assert config["name"] == "simple" and config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [16]  # int64 as JSON numbers
    assert client.get_model_config("versioned", "1")["name"] == "versioned"


def test_bytes_model_metadata_reports_bytes(client: Any) -> None:
    assert client.get_model_metadata("identity_bytes")["inputs"][0]["datatype"] == "BYTES"


# -- inference ---------------------------------------------------------------------------------


def test_infer_binary_in_and_out(client: Any) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = client.infer("identity", [identity_input(x)], request_id="abc")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    assert result.get_response()["id"] == "abc"
    assert result.get_response()["model_version"] == "1"


def test_infer_json_in_and_out(client: Any) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert "data" in result.get_output("OUTPUT0")


def test_requested_outputs_only_returns_those(client: Any) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros_like(a))


@pytest.mark.parametrize("binary", [True, False])
def test_bytes_tensors_round_trip(client: Any, binary: bool) -> None:
    x = np.array([[b"hello", b"", "wörld".encode()]], dtype=object)
    tensor = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(x, binary_data=binary)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer("identity_bytes", [tensor], outputs=[output])
    got = [v if isinstance(v, bytes) else v.encode() for v in result.as_numpy("OUTPUT0").ravel()]
    assert got == x.ravel().tolist()


@pytest.mark.parametrize(
    ("model", "array"),
    [
        ("identity_bool", np.array([True, False, True])),
        ("identity_int64", np.array([-(2**40), 0, 1, 2**40], dtype=np.int64)),
        ("identity_uint8", np.array([0, 7, 255], dtype=np.uint8)),
        ("identity_fp64", np.array([0.5, -1e300], dtype=np.float64)),
    ],
)
@pytest.mark.parametrize("binary", [True, False])
def test_datatypes_round_trip(client: Any, model: str, array: np.ndarray, binary: bool) -> None:
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer(model, [identity_input(array, binary=binary)], outputs=[out])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), array)


def test_fp16_is_binary_only(client: Any) -> None:
    x = np.array([[0.5, 1.5]], dtype=np.float16)
    result = client.infer("identity_fp16", [identity_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    error = error_of(lambda: client.infer("identity_fp16", [identity_input(x, binary=False)]))
    assert "receiving FP16 data via JSON is not supported" in error.message()
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    error = error_of(lambda: client.infer("identity_fp16", [identity_input(x)], outputs=[out]))
    assert "FP16" in error.message()
    assert_still_serving(client)


def test_specific_version_runs_that_version(client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    result = client.infer("versioned", [identity_input(x)], model_version="1")
    assert result.get_response()["model_version"] == "1"
    assert client.infer("versioned", [identity_input(x)]).get_response()["model_version"] == "2"


def test_classification_extension_with_labels(client: Any) -> None:
    x = np.array([0.1, 0.7, 0.05, 0.15], dtype=np.float32)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=2)
    result = client.infer("classes", [identity_input(x)], outputs=[out])
    assert result.get_output("OUTPUT0")["datatype"] == "BYTES"
    values = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("OUTPUT0")]
    assert values == ["0.700000:1:dog", "0.150000:3:fish"]


def test_custom_parameters_accepted_and_reserved_ones_rejected(
    server: ServingProcess, client: Any
) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    client.infer("identity", [identity_input(x)], parameters={"tag": "a", "n": 3, "f": 0.5})
    tensor = {"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]}
    for parameters, text in (({"triton_x": 1}, "reserved"), ({"x": [1]}, "unsupported type"),
                             ({"priority": -1}, "unsigned")):  # fmt: skip
        body = json.dumps({"inputs": [tensor], "parameters": parameters}).encode()
        status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body)
        assert status == 400 and text in json.loads(payload)["error"]
    assert_still_serving(client)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_request_and_response_compression(client: Any, algorithm: str) -> None:
    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    result = client.infer(
        "identity", [identity_input(x)], request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_response_compressed_when_accepted(server: ServingProcess) -> None:
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32",
                                   "data": [1, 2]}]}).encode()  # fmt: skip
    status, headers, payload = raw(
        server, "POST", "/v2/models/identity/infer", gzip.compress(body),
        {"Content-Encoding": "gzip", "Accept-Encoding": "identity;q=0.5, deflate;q=0.9"},
    )  # fmt: skip
    assert status == 200 and headers["content-encoding"] == "deflate"
    assert json.loads(zlib.decompress(payload))["outputs"][0]["data"] == [1.0, 2.0]


def test_unsupported_content_encoding_is_501(server: ServingProcess) -> None:
    status, headers, body = raw(server, "POST", "/v2/models/identity/infer", b"{}",
                                {"Content-Encoding": "br"})  # fmt: skip
    assert status == 501
    assert json.loads(body) == {"error": "Unsupported compression type"}
    assert headers["accept-encoding"] == "gzip, deflate"


def test_raw_binary_request(server: ServingProcess) -> None:
    x = np.arange(4, dtype=np.float32)
    status, headers, body = raw(server, "POST", "/v2/models/identity_fp64/infer",
                                x.astype(np.float64).tobytes(),
                                {"Inference-Header-Content-Length": "0"})  # fmt: skip
    assert status == 200, body
    header_length = int(headers["inference-header-content-length"])
    header = json.loads(body[:header_length])
    assert header["outputs"][0]["shape"] == [4]
    np.testing.assert_array_equal(np.frombuffer(body[header_length:], np.float64), x)


def test_raw_binary_bytes_body_is_the_single_element(server: ServingProcess) -> None:
    status, headers, body = raw(server, "POST", "/v2/models/identity_bytes_one/infer", b"427",
                                {"Inference-Header-Content-Length": "0"})  # fmt: skip
    assert status == 200, body
    header_length = int(headers["inference-header-content-length"])
    assert body[header_length:] == b"\x03\x00\x00\x00427"


@pytest.mark.parametrize(
    ("model", "body", "text"),
    [
        ("identity_bytes", b"427", "For BYTE datatype raw input 'INPUT0', the model must have "
         "input shape [1]"),
        ("identity_fp16_2d", b"\x00" * 8, "can not be deduced because there are more than one "
         "variable-sized dimension"),
        ("simple", b"\x00" * 64, "Raw request must only have 1 input (found 1) to be deduced but "
         "got 2 inputs in"),
    ],
)  # fmt: skip
def test_raw_binary_refusals_use_triton_texts(
    server: ServingProcess, model: str, body: bytes, text: str
) -> None:
    status, _, payload = raw(server, "POST", f"/v2/models/{model}/infer", body,
                             {"Inference-Header-Content-Length": "0"})  # fmt: skip
    assert status == 400
    assert text in json.loads(payload)["error"]


@pytest.mark.parametrize(
    ("model", "datatype", "value"),
    [("identity_bytes", "BYTES", '"hi"'), ("identity_int64", "INT64", "7")],
)
@pytest.mark.parametrize(("depth", "accepted"), [(50, True), (96, True), (120, False)])
def test_json_nesting_depth_limit(
    server: ServingProcess, model: str, datatype: str, value: str, depth: int, accepted: bool
) -> None:
    nested = value
    for _ in range(depth):
        nested = f"[{nested}]"
    shape = "[1,1]" if datatype == "BYTES" else "[4]"
    data = nested if datatype == "BYTES" else f"[{nested},{value},{value},{value}]"
    body = (
        f'{{"inputs":[{{"name":"INPUT0","datatype":"{datatype}","shape":{shape},"data":{data}}}]}}'
    )
    status, _, payload = raw(server, "POST", f"/v2/models/{model}/infer", body.encode())
    if accepted:
        assert status == 200, payload
    else:
        assert status == 400
        assert (
            "JSON nesting depth exceeds maximum allowed limit (100)" in json.loads(payload)["error"]
        )


# -- errors (PROTOCOL.md §1.3) -------------------------------------------------------------


def test_unknown_model_is_400_with_triton_text(client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    error = error_of(lambda: client.infer("nope", [identity_input(x)]))
    assert error.status() == "400"
    assert "Request for unknown model: 'nope' is not found" in error.message()
    error = error_of(lambda: client.get_model_metadata("nope"))
    assert "Request for unknown model: 'nope' is not found" in error.message()
    assert_still_serving(client)


def test_unknown_version_is_404(client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    error = error_of(lambda: client.infer("versioned", [identity_input(x)], model_version="9"))
    assert error.status() == "404"
    assert "'versioned' version 9 is not found" in error.message()
    assert_still_serving(client)


def test_a_version_in_unicode_digits_is_404(server: ServingProcess, client: Any) -> None:
    status, _, _ = raw(server, "POST", "/v2/models/versioned/versions/%C2%B9/infer", b"{}")
    assert status == 404  # "¹" is a digit to str.isdigit, but no version number
    assert_still_serving(client)


def test_wrong_datatype_is_400(client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float64)
    error = error_of(lambda: client.infer("identity", [identity_input(x)]))
    assert error.status() == "400"
    assert "data-type is 'FP64', but model 'identity' expects 'FP32'" in error.message()
    assert_still_serving(client)


def test_wrong_shape_and_batch_size_are_400(client: Any) -> None:
    a = np.ones((1, 15), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 15], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    error = error_of(lambda: client.infer("simple", inputs))
    assert (
        "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]"
        in (error.message())
    )
    big = np.ones((9, 2), dtype=np.float32)
    error = error_of(lambda: client.infer("identity", [identity_input(big)]))
    assert "inference request batch-size must be <= 8 for 'identity'" in error.message()
    assert_still_serving(client)


def test_missing_and_unexpected_inputs_are_400(client: Any) -> None:
    a = np.ones((1, 16), dtype=np.int32)
    only = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    only.set_data_from_numpy(a)
    error = error_of(lambda: client.infer("simple", [only]))
    assert "missing required input(s) ['INPUT1']" in error.message()
    extra = httpclient.InferInput("BOGUS", [1, 2], "FP32")
    extra.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
    x = np.ones((1, 2), dtype=np.float32)
    error = error_of(lambda: client.infer("identity", [identity_input(x), extra]))
    assert "unexpected inference input 'BOGUS' for model 'identity'" in error.message()
    assert_still_serving(client)


def test_unknown_and_duplicate_outputs_are_400(server: ServingProcess, client: Any) -> None:
    x = np.ones((1, 2), dtype=np.float32)
    out = httpclient.InferRequestedOutput("NOPE")
    error = error_of(lambda: client.infer("identity", [identity_input(x)], outputs=[out]))
    assert error.status() == "400" and "NOPE" in error.message()
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
            "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}  # fmt: skip
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", json.dumps(body).encode())
    assert status == 400
    assert json.loads(payload) == {"error": "output 'OUTPUT0' already exists in request"}


@pytest.mark.parametrize(
    ("tensor", "status", "text"),
    [
        ({"name": "INPUT0", "shape": [1, 2], "datatype": "FP32"}, 400, "must set only one"),
        ({"name": "INPUT0", "shape": [1, -2], "datatype": "FP32", "data": [1]}, 500,
         "Unable to parse 'shape'"),
        ({"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2]}, 400,
         "shape does not match true shape"),
        ({"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": ["a", "b"]}, 400,
         "expected number"),
        ({"name": "INPUT0", "shape": [1, 2], "datatype": "NOPE", "data": [1, 2]}, 400,
         "invalid datatype"),
        ({"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "data": [1.5, 2]}, 400,
         "expected integer"),
    ],
)  # fmt: skip
def test_malformed_json_inputs(
    server: ServingProcess, client: Any, tensor: dict[str, Any], status: int, text: str
) -> None:
    got, _, body = raw(server, "POST", "/v2/models/identity/infer",
                       json.dumps({"inputs": [tensor]}).encode())  # fmt: skip
    assert got == status
    assert text in json.loads(body)["error"]
    assert_still_serving(client)


def test_invalid_json_body_is_400(server: ServingProcess, client: Any) -> None:
    for body in (b"{not json", b"[]", b""):
        status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body)
        assert status == 400, payload
        assert "error" in json.loads(payload)
    assert_still_serving(client)


def binary_body(x: np.ndarray, *, declared: int | None = None) -> tuple[bytes, int]:
    header = json.dumps({"inputs": [{
        "name": "INPUT0", "shape": list(x.shape), "datatype": "FP32",
        "parameters": {"binary_data_size": declared if declared is not None else x.nbytes},
    }]}).encode()  # fmt: skip
    return header + x.tobytes(), len(header)


@pytest.mark.parametrize("header_value", ["abc", "-1", "999999", ""])
def test_malformed_binary_header_is_400(
    server: ServingProcess, client: Any, header_value: str
) -> None:
    body, _ = binary_body(np.ones((1, 2), dtype=np.float32))
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body,
                             {"Inference-Header-Content-Length": header_value})  # fmt: skip
    assert status == 400
    assert "Infer-Header-Content-Length" in json.loads(payload)["error"]
    assert_still_serving(client)


def test_binary_input_without_header_length_is_400(server: ServingProcess) -> None:
    body, _ = binary_body(np.ones((1, 2), dtype=np.float32))
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body)
    assert status == 400 and "Infer-Header-Content-Length" in json.loads(payload)["error"]


def test_truncated_and_oversupplied_binary_data_are_400(
    server: ServingProcess, client: Any
) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    body, header_length = binary_body(x)
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body[:-3],
                             {"Inference-Header-Content-Length": str(header_length)})  # fmt: skip
    assert status == 400 and "unexpected size for input" in json.loads(payload)["error"]
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body + b"xx",
                             {"Inference-Header-Content-Length": str(header_length)})  # fmt: skip
    assert status == 400 and "unexpected additional input data" in json.loads(payload)["error"]
    body, header_length = binary_body(x, declared=12)
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", body[:-4],
                             {"Inference-Header-Content-Length": str(header_length)})  # fmt: skip
    assert status == 400 and "unexpected size for input" in json.loads(payload)["error"]
    assert_still_serving(client)


def test_malformed_bytes_elements_are_400(server: ServingProcess, client: Any) -> None:
    data = struct.pack("<I", 100) + b"short"
    tensor = {"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES",
              "parameters": {"binary_data_size": len(data)}}  # fmt: skip
    header = json.dumps({"inputs": [tensor]}).encode()
    status, _, payload = raw(server, "POST", "/v2/models/identity_bytes/infer", header + data,
                             {"Inference-Header-Content-Length": str(len(header))})  # fmt: skip
    assert status == 400, payload
    assert_still_serving(client)


def test_oversized_request_is_413_before_the_body_is_read(
    server: ServingProcess, client: Any
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=10)
    try:
        conn.putrequest("POST", "/v2/models/identity/infer")
        conn.putheader("Content-Length", str(MAX_REQUEST_BYTES * 4))
        conn.endheaders()
        conn.send(b"{" * 1024)  # far less than announced: the answer must not wait for the rest
        response = conn.getresponse()
        assert response.status == 413
        assert "exceeds" in json.loads(response.read())["error"]
    finally:
        conn.close()
    assert_still_serving(client)


def test_an_oversized_chunked_body_is_413(server: ServingProcess, client: Any) -> None:
    # NOTE: no content-length to refuse it by: it is refused once more than the limit came.
    chunk = b"{" * (MAX_REQUEST_BYTES + 1)
    with socket.create_connection(("127.0.0.1", server.ports.http), timeout=10) as sock:
        sock.sendall(
            b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n"
        )  # fmt: skip
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"exceeds the maximum input size" in answer
    assert_still_serving(client)


def binary_identity_request(elements: np.ndarray[Any, Any]) -> bytes:
    """A whole HTTP request inferring ``elements`` (FP32) on ``identity``, binary both ways."""
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [1, elements.size], "datatype": "FP32",
                    "parameters": {"binary_data_size": elements.nbytes}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    body = header + elements.tobytes()
    return (
        b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: %d\r\nInference-Header-Content-Length: %d\r\n\r\n"
        % (len(body), len(header)) + body
    )  # fmt: skip


def _nearly_sent_infer(server: ServingProcess, elements: np.ndarray[Any, Any]) -> socket.socket:
    """A binary identity request of ``elements`` on a new connection, all but its last byte sent."""
    sock = socket.create_connection(("127.0.0.1", server.ports.http), timeout=30)
    sock.sendall(binary_identity_request(elements)[:-1])
    return sock


def read_answer(sock: socket.socket) -> http.client.HTTPResponse:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response


RESET = 0  # ``finish_all``'s status for a connection the server reset before its answer was read


def finish_all(socks: list[socket.socket], rests: list[bytes]) -> list[tuple[int, bytes]]:
    """Send each connection the rest of its request; every answer's status and body (``RESET``
    where the server had already refused the request and closed before the rest went: the close
    of a connection with unread bytes is a reset, which may take the answer with it). Every
    connection is closed afterwards, whatever happened."""
    with contextlib.ExitStack() as closing:
        for sock in socks:
            closing.enter_context(sock)
        for sock, rest in zip(socks, rests, strict=True):
            sock.settimeout(60)
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                sock.sendall(rest)
        answers = []
        for sock in socks:
            try:
                response = read_answer(sock)
                answers.append((response.status, response.read()))
            except ConnectionResetError:
                answers.append((RESET, b"the server reset the connection"))
        return answers


def finish_and_check(
    socks: list[socket.socket], rests: list[bytes], elements: np.ndarray[Any, Any]
) -> None:
    """Send each connection the rest of its ``binary_identity_request``, then check that every
    one is answered ``elements``."""
    for status, payload in finish_all(socks, rests):
        assert status == 200, payload
        assert payload.endswith(elements.tobytes())


def test_bodies_still_arriving_are_held_to_a_budget_then_released(
    server: ServingProcess, client: Any
) -> None:
    """Clients that each send most of a body of nearly the limit and stop: the server holds
    ``HELD_BODIES`` of them; the requests whose bytes would go past that get 503, Retry-After and
    a close (those bodies' bytes freed), and the others, finished, are answered in full. Bodies
    that were answered or whose clients left give their bytes back: the budget holds as many
    again afterwards."""
    elements = np.arange((MAX_REQUEST_BYTES - 4096) // 4, dtype=np.float32)
    last_byte = elements.tobytes()[-1:]  # what ``_nearly_sent_infer`` leaves unsent
    socks = [_nearly_sent_infer(server, elements) for _ in range(HELD_BODIES + 2)]
    refused: list[socket.socket] = []
    deadline = time.monotonic() + 30
    while len(refused) < 2 and time.monotonic() < deadline:
        waiting = [sock for sock in socks if sock not in refused]
        refused += select.select(waiting, [], [], 1)[0]
    assert len(refused) == 2, "past the budget, the bodies that would exceed it must be refused"
    for sock in refused:
        with sock:
            response = read_answer(sock)
            assert response.status == 503
            assert response.getheader("retry-after") == "1"
            assert "too many request bytes" in json.loads(response.read())["error"]
            # Closed, the rest of its body never read (unread bytes make the close a reset).
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
    # Every other request is still held whole and is answered once its last byte comes.
    held = [sock for sock in socks if sock not in refused]
    finish_and_check(held, [last_byte] * len(held), elements)

    left = [_nearly_sent_infer(server, elements) for _ in range(HELD_BODIES)]
    time.sleep(0.5)  # NOTE: no answer to wait for: give the server time to take the bytes
    for sock in left:  # the clients go away mid-body
        sock.close()
    # The server learns that they left from their closed connections, a moment later (through a
    # front-end, one hop later still): until then new bodies may be refused, never answered
    # otherwise; after it, as many as before fit again.
    deadline = time.monotonic() + 30
    while True:
        again = [_nearly_sent_infer(server, elements) for _ in range(HELD_BODIES)]
        answers = finish_all(again, [last_byte] * len(again))
        statuses = {status for status, _ in answers}
        assert statuses <= {200, 503, RESET}, answers  # refused (and closed) as the rest went
        if statuses == {200}:
            break
        assert time.monotonic() < deadline, "the bytes of bodies whose clients left never came back"
        time.sleep(0.2)
    assert all(payload.endswith(elements.tobytes()) for _, payload in answers)
    assert_still_serving(client)


def test_oversized_decompressed_request_is_400(server: ServingProcess) -> None:
    bomb = gzip.compress(b" " * (MAX_REQUEST_BYTES + 10))
    status, _, payload = raw(server, "POST", "/v2/models/identity/infer", bomb,
                             {"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 400 and "exceeds" in json.loads(payload)["error"]


def test_unknown_path_404_and_wrong_verb_405(server: ServingProcess) -> None:
    assert raw(server, "GET", "/v3/x")[::2] == (404, b'{"error":"Not Found"}')
    assert raw(server, "GET", "/v2/models/identity/versions/abc")[0] == 404
    assert raw(server, "GET", "/v2/models/identity/infer")[::2] == (
        405, b'{"error":"Method Not Allowed"}')  # fmt: skip
    assert raw(server, "POST", "/v2/health/live")[0] == 405


def test_shared_memory_trace_and_logging_are_not_implemented(
    client: Any, server: ServingProcess
) -> None:
    assert raw(server, "GET", "/v2/systemsharedmemory/status")[0] == 501
    assert raw(server, "GET", "/v2/trace/setting")[0] == 501
    assert raw(server, "GET", "/v2/logging")[0] == 501


# -- extensions ----------------------------------------------------------------------------


def test_repository_index_lists_models_with_state(client: Any) -> None:
    index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
    assert index[("simple", "1")]["state"] == "READY"
    assert index[("versioned", "2")]["state"] == "READY"
    assert {"name": "classes", "version": "1", "state": "READY"} in index.values()


def test_repository_index_ready_must_be_bool(server: ServingProcess) -> None:
    status, _, body = raw(server, "POST", "/v2/repository/index", b'{"ready": "yes"}')
    assert status == 400
    status, _, body = raw(server, "POST", "/v2/repository/index", b'{"ready": true}')
    assert status == 200 and all(m["state"] == "READY" for m in json.loads(body))


def test_load_and_unload_refused_outside_explicit_mode(client: Any) -> None:
    for call in (lambda: client.load_model("simple"), lambda: client.unload_model("simple")):
        error = error_of(call)
        assert error.status() == "503"
        assert "explicit model load / unload is not allowed" in error.message()
    assert client.is_model_ready("simple")


def test_statistics_extension(client: Any) -> None:
    x = np.ones((2, 2), dtype=np.float32)
    client.infer("versioned", [identity_input(x)], model_version="1")
    stats = client.get_inference_statistics("versioned", "1")["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("versioned", "1")]
    assert stats[0]["inference_count"] >= 2 and stats[0]["inference_stats"]["success"]["count"] >= 1
    everything = client.get_inference_statistics()["model_stats"]
    assert {"simple", "identity", "versioned"} <= {s["name"] for s in everything}
    assert len(client.get_inference_statistics("versioned")["model_stats"]) == 2


def test_live_stats_route(server: ServingProcess, client: Any) -> None:
    assert_still_serving(client)
    status, headers, body = raw(server, "GET", "/v2/portico/live-stats")
    assert status == 200
    assert any(m["model"] == "identity" for m in json.loads(body)["models"])


def test_metrics_port_serves_prometheus_text(server: ServingProcess, client: Any) -> None:
    assert_still_serving(client)
    conn = http.client.HTTPConnection("127.0.0.1", server.ports.metrics, timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    assert response.status == 200
    assert "nv_cpu_utilization" in text
    assert 'nv_inference_request_success{model="identity",version="1"}' in text
