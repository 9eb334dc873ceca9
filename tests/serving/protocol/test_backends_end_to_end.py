"""Every backend kind behind both transports: TorchScript, Python (add_sub and BYTES identity)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from repository import demo_models as dm
from serving.main import ServingProcess
from tests.serving.harness import folder_settings

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingProcess]:
    repo: Path = tmp_path_factory.mktemp("mixed")
    dm.write_torchscript_add_sub(repo, "simple_torch")
    dm.write_python_add_sub(repo, "add_sub")
    dm.write_python_identity(repo, "string_identity")
    decoupled = dm.PYTHON_IDENTITY_CONFIG + "model_transaction_policy { decoupled: true }\n"
    dm.write_python_model(repo, "decoupled", dm.PYTHON_IDENTITY, decoupled)
    process = ServingProcess(folder_settings(repo)).start()
    yield process
    process.stop()


def test_torchscript_add_sub_over_http_and_grpc(mixed: ServingProcess) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    http = httpclient.InferenceServerClient(mixed.http_url)
    assert http.get_model_metadata("simple_torch")["platform"] == "pytorch_libtorch"
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT__0", "INPUT__1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = http.infer("simple_torch", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)
    with grpcclient.InferenceServerClient(mixed.grpc_url) as grpc:
        ginputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT__0", "INPUT__1")]
        ginputs[0].set_data_from_numpy(a)
        ginputs[1].set_data_from_numpy(b)
        np.testing.assert_array_equal(
            grpc.infer("simple_torch", ginputs).as_numpy("OUTPUT__0"), a + b
        )


def test_python_add_sub(mixed: ServingProcess) -> None:
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)
    http = httpclient.InferenceServerClient(mixed.http_url)
    assert http.get_model_metadata("add_sub")["platform"] == "python"
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a, binary_data=False)
    inputs[1].set_data_from_numpy(b)
    result = http.infer("add_sub", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)


def test_python_bytes_identity_over_both_transports(mixed: ServingProcess) -> None:
    data = np.array([[b"alpha", b"", "ümlaut".encode()]], dtype=object)
    http = httpclient.InferenceServerClient(mixed.http_url)
    tensor = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    tensor.set_data_from_numpy(data)
    assert http.infer("string_identity", [tensor]).as_numpy("OUTPUT0").tolist() == data.tolist()
    with grpcclient.InferenceServerClient(mixed.grpc_url) as grpc:
        gtensor = grpcclient.InferInput("INPUT0", [1, 3], "BYTES")
        gtensor.set_data_from_numpy(data)
        out = grpc.infer("string_identity", [gtensor]).as_numpy("OUTPUT0")
        assert out.tolist() == data.tolist()


def test_decoupled_models_are_refused_on_unary_endpoints(mixed: ServingProcess) -> None:
    data = np.array([[b"x"]], dtype=object)
    http = httpclient.InferenceServerClient(mixed.http_url)
    tensor = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as info:
        http.infer("decoupled", [tensor])
    assert info.value.status() == "501"
    assert "doesn't support models with decoupled transaction policy" in info.value.message()
    with grpcclient.InferenceServerClient(mixed.grpc_url) as grpc:
        gtensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
        gtensor.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as info:
            grpc.infer("decoupled", [gtensor])
        assert info.value.status() == "StatusCode.UNIMPLEMENTED"
        assert "ModelInfer RPC doesn't support models with decoupled" in info.value.message()
