"""Admission control through tritonclient: the per-replica in-flight cap (HTTP 503 / gRPC
UNAVAILABLE, health still answering), gRPC messages capped like HTTP bodies, BYTES element counts
bounded, and unexpected failures answered with a request id instead of their text."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc as grpc_module
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.core.datatypes import MAX_BYTES_ELEMENTS
from serving.core.server import InferenceServer
from serving.main import ServingProcess
from serving.sources.directory import DirectorySource
from tests.serving.harness import HTTP_WORKERS, folder_settings, identity_input

pytestmark = pytest.mark.embedded

MAX_REQUEST_BYTES = 16 * 1024 * 1024
GATED_MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        # Held until the gate opens; the load's zero-filled warm-up request passes at once.
        while any(x.any() for x in inputs) and not os.path.exists(self.gate):
            time.sleep(0.01)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)])
                for x in inputs]
"""


def write_gated_model(repo: Path, gate: Path) -> None:
    """``gated``, which holds each request until ``gate`` exists."""
    config = dm.build_config(
        "gated", backend="python", max_batch_size=0,
        inputs=[dm.TensorDecl("INPUT0", "FP32", (-1,))],
        outputs=[dm.TensorDecl("OUTPUT0", "FP32", (-1,))],
        instance_kind="KIND_CPU", parameters={"gate": str(gate)},
    )  # fmt: skip
    dm.write_python_model(repo, "gated", GATED_MODEL, config)


def serve_gated(
    workers: int,
    tmp_path_factory: pytest.TempPathFactory,
    gate: Path,
    source: type[DirectorySource] = DirectorySource,
    **overrides: Any,
) -> Iterator[ServingProcess]:
    """``identity``, ``identity_bytes`` and ``gated`` served in-process (``workers`` 0) or behind
    that many front-ends of each protocol, the gate closed."""
    gate.unlink(missing_ok=True)  # closed again for each of a fixture's servers
    repo: Path = tmp_path_factory.mktemp("repo")
    dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
    dm.write_onnx_identity(repo, "identity_bytes", dtype="BYTES", dims=(-1,), max_batch_size=8)
    write_gated_model(repo, gate)
    settings = folder_settings(repo, http_workers=workers, grpc_workers=workers, **overrides)
    with ServingProcess(settings, source(settings)) as process:
        yield process


class FaultySource(DirectorySource):
    """A folder source whose on-demand loading fails the way a bug would: an unexpected
    exception whose text must never reach a client."""

    async def start(self, server: InferenceServer) -> list[str]:
        errors = await super().start(server)

        async def broken(name: str, version: int) -> bool:
            raise RuntimeError("secret detail: /etc/portico/key.pem")

        server.on_demand = broken
        return errors


# In process, and behind front-ends of both protocols (the cap is built into the front-ends'
# relayed handlers there, not into a grpc server's).
@pytest.fixture(scope="module", params=HTTP_WORKERS, ids=("in-process", "frontends"))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, gate: Path
) -> Iterator[ServingProcess]:
    yield from serve_gated(request.param, tmp_path_factory, gate, FaultySource,
                           max_in_flight_requests=2,
                           max_request_bytes=MAX_REQUEST_BYTES)  # fmt: skip


def raw_request(server: ServingProcess, path: str, body: bytes) -> http.client.HTTPResponse:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_in_flight_cap_refuses_with_503_and_unavailable_while_health_answers(
    server: ServingProcess, gate: Path
) -> None:
    assert server.server is not None
    gated = server.server.models["gated"].versions[1]
    x = np.ones(3, dtype=np.float32)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        held = [pool.submit(_infer_http, server, "gated", x) for _ in range(2)]
        deadline = time.monotonic() + 60
        while gated.in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gated.in_flight == 2
        with httpclient.InferenceServerClient(server.http_url) as http:
            with pytest.raises(InferenceServerException) as info:
                http.infer("identity", [identity_input(np.ones((1, 2), dtype=np.float32))])
            assert info.value.status() == "503"
            assert "overloaded" in str(info.value.message())
            assert http.is_server_live() and http.is_server_ready()
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            tensor = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
            with pytest.raises(InferenceServerException) as info:
                grpc.infer("identity", [tensor])
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert "overloaded" in str(info.value.message())
            with pytest.raises(InferenceServerException, match="overloaded"):
                grpc.get_model_metadata("identity")  # every RPC but health counts
            assert grpc.is_server_live() and grpc.is_server_ready()
            assert grpc.is_model_ready("identity")
        with grpc_module.insecure_channel(server.grpc_url) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert check.status == health_pb2.HealthCheckResponse.SERVING
        gate.touch()
        for future in held:
            np.testing.assert_array_equal(future.result(timeout=60), x)
    assert _infer_http(server, "identity", np.ones((1, 2), dtype=np.float32)).shape == (1, 2)


def _infer_http(server: ServingProcess, model: str, x: np.ndarray[Any, Any]) -> Any:
    with httpclient.InferenceServerClient(server.http_url, network_timeout=120) as client:
        return client.infer(model, [identity_input(x)]).as_numpy("OUTPUT0")


def test_grpc_messages_are_capped_at_the_http_max_input_size(server: ServingProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        x = np.ones((1, 3_000_000), dtype=np.float32)  # 12 MB: over gRPC's 4 MiB default
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        assert client.infer("identity", [tensor]).as_numpy("OUTPUT0").shape == x.shape
        x = np.ones((1, 5_000_000), dtype=np.float32)  # 20 MB: over the 16 MiB cap
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as info:
            client.infer("identity", [tensor])
        assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"


def empty_strings(count: int) -> np.ndarray[Any, Any]:
    return np.array([b""] * count, dtype=np.object_).reshape(1, count)


def test_bytes_elements_past_the_bound_are_invalid_over_http_and_grpc(
    server: ServingProcess,
) -> None:
    too_many = empty_strings(MAX_BYTES_ELEMENTS + 1)
    message = f"more than the {MAX_BYTES_ELEMENTS} a request may carry"
    with httpclient.InferenceServerClient(server.http_url) as http:
        tensor = httpclient.InferInput("INPUT0", list(too_many.shape), "BYTES")
        tensor.set_data_from_numpy(too_many)
        with pytest.raises(InferenceServerException, match=message) as info:
            http.infer("identity_bytes", [tensor])
        assert info.value.status() == "400"
        tensor = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
        tensor.set_data_from_numpy(empty_strings(2))
        assert http.infer("identity_bytes", [tensor]).as_numpy("OUTPUT0").shape == (1, 2)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        tensor = grpcclient.InferInput("INPUT0", list(too_many.shape), "BYTES")
        tensor.set_data_from_numpy(too_many)
        with pytest.raises(InferenceServerException, match=message) as info:
            grpc.infer("identity_bytes", [tensor])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_bytes_data_beyond_its_declared_shape_is_refused(server: ServingProcess) -> None:
    elements = b"".join(len(b"ab").to_bytes(4, "little") + b"ab" for _ in range(3))
    tensor = {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1],
              "parameters": {"binary_data_size": len(elements)}}  # fmt: skip
    header = json.dumps({"inputs": [tensor]})
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/v2/models/identity_bytes/infer", body=header.encode() + elements,
                       headers={"Inference-Header-Content-Length": str(len(header))})  # fmt: skip
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert response.status == 400
    assert "more than the 1 its shape declares" in body["error"]


def test_unexpected_failure_answers_500_with_a_request_id_and_no_exception_text(
    server: ServingProcess, caplog: pytest.LogCaptureFixture
) -> None:
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1],
                                   "data": [1.0]}]}).encode()  # fmt: skip
    response = raw_request(server, "/v2/models/identity/versions/9/infer", body)
    assert response.status == 500
    request_id = response.getheader("X-Request-ID")
    assert request_id
    with httpclient.InferenceServerClient(server.http_url) as http:
        x = np.ones((1, 1), dtype=np.float32)
        with pytest.raises(InferenceServerException) as info:
            http.infer("identity", [identity_input(x)], model_version="9")
    assert info.value.status() == "500"
    assert info.value.message().startswith("Internal server error (request id ")
    assert "secret" not in str(info.value) and "RuntimeError" not in str(info.value)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
        with pytest.raises(InferenceServerException) as info:
            grpc.infer("identity", [tensor], model_version="9")
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message().startswith("Internal server error (request id ")
    assert "secret" not in str(info.value)
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and "secret detail" in str(logged[0].exc_info[1])


def test_a_stream_runs_a_bounded_number_of_requests_at_once(tmp_path: Path) -> None:
    from serving.protocol.grpc.service import STREAM_MAX_IN_FLIGHT

    repo = tmp_path / "repo"
    stream_gate = tmp_path / "stream-gate"
    write_gated_model(repo, stream_gate)
    sent = STREAM_MAX_IN_FLIGHT + 36
    answers: list[Any] = []
    with ServingProcess(folder_settings(repo)) as server:
        assert server.server is not None
        gated = server.server.models["gated"].versions[1]
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.start_stream(lambda result, error: answers.append((result, error)))
            tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
            tensor.set_data_from_numpy(np.ones(2, dtype=np.float32))
            for index in range(sent):
                client.async_stream_infer("gated", [tensor], request_id=str(index))
            deadline = time.monotonic() + 60
            while gated.in_flight < STREAM_MAX_IN_FLIGHT and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # every message had time to arrive; none past the bound started
            assert gated.in_flight == STREAM_MAX_IN_FLIGHT
            stream_gate.touch()
            while len(answers) < sent and time.monotonic() < deadline + 60:
                time.sleep(0.01)
            client.stop_stream()
    assert len(answers) == sent and all(error is None for _, error in answers)
