"""BLS: a Python model calls other models of the same server (``InferenceRequest.exec``)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.backends.python import shm
from serving.backends.python.instance import PythonInstance
from serving.main import ServingProcess
from tests.serving.harness import folder_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

ADD_SUB_IO = """
input { name: "INPUT0" data_type: TYPE_INT32 dims: [1, 16] }
input { name: "INPUT1" data_type: TYPE_INT32 dims: [1, 16] }
output { name: "OUTPUT0" data_type: TYPE_INT32 dims: [1, 16] }
output { name: "OUTPUT1" data_type: TYPE_INT32 dims: [1, 16] }
instance_group { kind: KIND_CPU }
"""

# Calls ``simple`` (ONNX) with its own inputs; request parameters pick another target, drop an
# input or set the BLS timeout, so one model shows every case.
BLS_SYNC = textwrap.dedent("""\
    import json
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [self.forward(request) for request in requests]

        def forward(self, request):
            params = json.loads(request.parameters())
            inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0")]
            if not params.get("drop_input1"):
                inputs.append(pb_utils.get_input_tensor_by_name(request, "INPUT1"))
            response = pb_utils.InferenceRequest(
                model_name=params.get("target", "simple"),
                inputs=inputs,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                timeout=params.get("timeout_us", 0),
            ).exec()
            if response.has_error():
                return pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("BLS failed: " + response.error().message()))
            return pb_utils.InferenceResponse([
                pb_utils.Tensor(name, pb_utils.get_output_tensor_by_name(response, name).as_numpy())
                for name in ("OUTPUT0", "OUTPUT1")
            ])
""")

# ``async def execute``: the sum from ``simple`` (ONNX) and the difference from ``py_add_sub``
# (another Python model), both requests in flight at once.
BLS_ASYNC = textwrap.dedent("""\
    import asyncio
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            return list(await asyncio.gather(*(self.forward(r) for r in requests)))

        async def forward(self, request):
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            onnx, python = await asyncio.gather(
                pb_utils.InferenceRequest(model_name="simple", inputs=inputs,
                                          requested_output_names=["OUTPUT0"]).async_exec(),
                pb_utils.InferenceRequest(model_name="py_add_sub", inputs=inputs,
                                          requested_output_names=["OUTPUT1"]).async_exec(),
            )
            for response in (onnx, python):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
            return pb_utils.InferenceResponse([
                pb_utils.get_output_tensor_by_name(onnx, "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(python, "OUTPUT1"),
            ])
""")

MODEL_CONFIG = 'backend: "python" max_batch_size: 0' + ADD_SUB_IO

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("bls")
    dm.write_onnx_add_sub(repo, "simple", dims=(16,), max_batch_size=8)
    dm.write_python_model(repo, "py_add_sub", dm.PYTHON_ADD_SUB, MODEL_CONFIG)
    dm.write_python_model(repo, "bls_sync", BLS_SYNC, MODEL_CONFIG)
    dm.write_python_model(repo, "bls_async", BLS_ASYNC, MODEL_CONFIG)
    decoupled = dm.PYTHON_IDENTITY_CONFIG + "model_transaction_policy { decoupled: true }\n"
    dm.write_python_model(repo, "decoupled", dm.PYTHON_IDENTITY, decoupled)
    process = ServingProcess(folder_settings(repo, cpu_count=2)).start()
    yield process
    process.stop()


def http_infer(
    server: ServingProcess, model: str, parameters: dict[str, object] | None = None
) -> httpclient.InferResult:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        return client.infer(model, inputs, parameters=parameters)
    finally:
        client.close()


def grpc_infer(server: ServingProcess, model: str) -> grpcclient.InferResult:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        return client.infer(model, inputs)


def test_exec_runs_an_onnx_model_over_http_and_grpc(server: ServingProcess) -> None:
    for result in (http_infer(server, "bls_sync"), grpc_infer(server, "bls_sync")):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_exec_runs_another_python_model(server: ServingProcess) -> None:
    result = http_infer(server, "bls_sync", {"target": "py_add_sub"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_async_exec_runs_two_models_at_once_over_http_and_grpc(server: ServingProcess) -> None:
    for result in (http_infer(server, "bls_async"), grpc_infer(server, "bls_async")):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_unknown_model_comes_back_as_an_error_response(server: ServingProcess) -> None:
    with pytest.raises(InferenceServerException) as info:
        http_infer(server, "bls_sync", {"target": "no_such_model"})
    assert "BLS failed: Request for unknown model: 'no_such_model'" in info.value.message()
    np.testing.assert_array_equal(http_infer(server, "bls_sync").as_numpy("OUTPUT0"), A + B)


def test_a_decoupled_model_cannot_answer_a_bls_request(server: ServingProcess) -> None:
    with pytest.raises(InferenceServerException) as info:
        http_infer(server, "bls_sync", {"target": "decoupled"})
    assert info.value.message() == (
        "BLS failed: model 'decoupled' is decoupled: its responses can only be streamed "
        "(ModelStreamInfer)"
    )


def test_bad_input_comes_back_as_an_error_response(server: ServingProcess) -> None:
    with pytest.raises(InferenceServerException) as info:
        http_infer(server, "bls_sync", {"drop_input1": True})
    assert "BLS failed:" in info.value.message()
    assert "INPUT1" in info.value.message()


def test_a_model_calling_itself_times_out_and_the_server_keeps_serving(
    server: ServingProcess,
) -> None:
    # One instance: the inner request can never run while the outer one waits for it.
    with pytest.raises(InferenceServerException) as info:
        http_infer(server, "bls_sync", {"target": "bls_sync", "timeout_us": 500_000})
    assert "BLS failed: request for model 'bls_sync' timed out" in info.value.message()
    np.testing.assert_array_equal(http_infer(server, "bls_sync").as_numpy("OUTPUT1"), A - B)
    np.testing.assert_array_equal(grpc_infer(server, "bls_async").as_numpy("OUTPUT0"), A + B)


def test_stopping_the_server_unlinks_the_segments_bls_used(tmp_path: Path) -> None:
    dm.write_onnx_add_sub(tmp_path, "simple", dims=(16,), max_batch_size=8)
    dm.write_python_model(tmp_path, "bls_sync", BLS_SYNC, MODEL_CONFIG)
    process = ServingProcess(folder_settings(tmp_path)).start()
    try:
        np.testing.assert_array_equal(http_infer(process, "bls_sync").as_numpy("OUTPUT0"), A + B)
        assert process.server is not None
        (instance,) = process.server.models["bls_sync"].versions[1].instances
        assert isinstance(instance, PythonInstance)
        prefix = instance.shm_prefix
        names = shm.leftover(prefix)
        # execute's two regions, and one per direction for the BLS request and its answer
        assert {name[len(prefix)] for name in names} == {"i", "o", "b"}, names
        assert any(name.startswith(prefix + "os") for name in names), names
    finally:
        process.stop()
    assert shm.leftover(prefix) == []
