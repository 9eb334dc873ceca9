"""triton_python_backend_utils helpers behave as Triton's do."""

from __future__ import annotations

import numpy as np
import pytest

from serving.backends.python import triton_python_backend_utils as pb_utils

pytestmark = pytest.mark.embedded


def test_tensor_and_request_accessors() -> None:
    tensor = pb_utils.Tensor("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert tensor.name() == "X" and tensor.shape() == [2, 3] and tensor.is_cpu()
    assert tensor.triton_dtype() == 11
    request = pb_utils.InferenceRequest(
        inputs=[tensor], requested_output_names=["Y"], correlation_id="s1", parameters={"a": 1}
    )
    assert pb_utils.get_input_tensor_by_name(request, "X") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "missing") is None
    assert request.correlation_id() == "s1" and request.parameters() == '{"a": 1}'
    with pytest.raises(pb_utils.TritonModelException, match="BLS"):
        request.exec()


def test_string_tensors_become_object_arrays_of_bytes_or_str() -> None:
    tensor = pb_utils.Tensor("S", np.array(["a", "bc"]))
    assert tensor.as_numpy().dtype == object and tensor.triton_dtype() == 13
    encoded = pb_utils.serialize_byte_tensor(np.array([b"a", b"bc"], dtype=object))
    assert encoded is not None
    assert pb_utils.deserialize_bytes_tensor(encoded).tolist() == [b"a", b"bc"]


def test_type_helpers_and_config_lookup() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    config = {"input": [{"name": "A"}], "output": [{"name": "B"}]}
    assert pb_utils.get_input_config_by_name(config, "A") == {"name": "A"}
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B"}
    assert pb_utils.get_output_config_by_name(config, "C") is None
    assert not pb_utils.using_decoupled_model_transaction_policy({})


def test_response_with_error() -> None:
    error = pb_utils.TritonError("nope", pb_utils.TritonError.NOT_FOUND)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() and response.error() is error
    assert error.code() == pb_utils.TritonError.NOT_FOUND and error.message() == "nope"
    tensor = pb_utils.Tensor("Y", np.zeros(1))
    ok = pb_utils.InferenceResponse([tensor])
    assert pb_utils.get_output_tensor_by_name(ok, "Y") is tensor and not ok.has_error()


def test_from_dlpack_accepts_a_torch_capsule_and_an_exporter() -> None:
    torch = pytest.importorskip("torch")
    capsule = torch.utils.dlpack.to_dlpack(torch.arange(3, dtype=torch.float32))
    assert pb_utils.Tensor.from_dlpack("T", capsule).as_numpy().tolist() == [0.0, 1.0, 2.0]
    exporter = np.arange(2, dtype=np.int32)
    assert pb_utils.Tensor.from_dlpack("N", exporter).as_numpy().tolist() == [0, 1]
    assert pb_utils.Tensor("X", exporter).to_dlpack() is not None
