"""The codecs on their own: JSON typing rules, BYTES framing, compression negotiation."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from serving.core.datatypes import NUMPY_BY_WIRE, tensor_buffer, tensor_from_bytes, tensor_to_bytes
from serving.errors import InvalidArgumentError
from serving.protocol.config_json import config_to_json
from serving.protocol.grpc_codec import decode_infer_request as decode_grpc
from serving.protocol.http.compression import choose_encoding
from serving.protocol.json_codec import decode_infer_request as decode_json
from serving.protocol.json_codec import tensor_from_json

pytestmark = pytest.mark.embedded


def test_json_accepts_nested_or_flat_data() -> None:
    nested = tensor_from_json([[1, 2], [3, 4]], "INT32", [2, 2], name="x")
    flat = tensor_from_json([1, 2, 3, 4], "INT32", [2, 2], name="x")
    assert nested.dtype == np.int32 and (nested == flat).all()


@pytest.mark.parametrize(
    ("data", "datatype", "text"),
    [
        ([1, 0], "BOOL", "boolean"),
        ([True, False], "INT32", "integer"),
        ([1.5], "INT64", "integer"),
        ([True], "FP32", "number"),
        ([1], "BYTES", "string"),
        ([1.0], "FP16", "binary data format"),
    ],
)
def test_json_does_not_coerce_across_kinds(data: list[object], datatype: str, text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=text):
        tensor_from_json(data, datatype, [len(data)], name="x")


def test_json_integers_out_of_range_are_truncated_not_rejected() -> None:
    assert tensor_from_json([300], "UINT8", [1], name="x").tolist() == [44]
    assert tensor_from_json([2**64 - 1], "UINT64", [1], name="x").tolist() == [2**64 - 1]


def test_bytes_framing_round_trip_and_errors() -> None:
    array = np.array([b"a", b"", "é".encode()], dtype=object)
    raw = tensor_to_bytes(array)
    assert raw == b"\x01\x00\x00\x00a\x00\x00\x00\x00\x02\x00\x00\x00\xc3\xa9"
    back = tensor_from_bytes(raw, "BYTES", [3], name="x", model_name="m")
    assert back.tolist() == array.tolist()
    with pytest.raises(InvalidArgumentError, match="more than the 2 its shape declares"):
        tensor_from_bytes(raw, "BYTES", [2], name="x", model_name="m")
    with pytest.raises(InvalidArgumentError, match="claims 9 bytes"):
        tensor_from_bytes(struct.pack("<I", 9) + b"abc", "BYTES", [1], name="x", model_name="m")
    with pytest.raises(InvalidArgumentError, match="unexpected end"):
        tensor_from_bytes(b"\x01\x00", "BYTES", [1], name="x", model_name="m")


def test_a_numeric_output_is_sent_from_its_own_memory_and_copied_only_when_it_must_be() -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = tensor_buffer(array)
    assert np.shares_memory(np.frombuffer(view, dtype=np.uint8), array)  # no copy
    assert bytes(view) == array.tobytes() == tensor_to_bytes(array)
    for must_copy in (array.T, array.astype(">f4")):  # not contiguous; big-endian
        raw = tensor_buffer(must_copy)
        assert not np.shares_memory(np.frombuffer(raw, dtype=np.uint8), must_copy)
        assert bytes(raw) == np.ascontiguousarray(must_copy, dtype="<f4").tobytes()
    assert bytes(tensor_buffer(np.zeros((0, 4), dtype=np.float32))) == b""
    # NOTE: numpy exports no buffer format for bfloat16: its bytes come the other way, uncopied.
    bf16 = np.arange(4, dtype=np.float32).astype(NUMPY_BY_WIRE["BF16"])
    raw = tensor_buffer(bf16)
    assert np.shares_memory(np.frombuffer(raw, dtype=np.uint8), bf16)
    assert bytes(raw) == bf16.tobytes()
    assert bytes(tensor_buffer(np.array(2.5, dtype=np.float64))) == np.float64(2.5).tobytes()


def test_fixed_size_tensors_check_their_byte_count() -> None:
    with pytest.raises(InvalidArgumentError, match="expecting 8 bytes"):
        tensor_from_bytes(b"\x00" * 7, "FP32", [2], name="x", model_name="m")
    bf16 = tensor_from_bytes(b"\x80\x3f", "BF16", [1], name="x", model_name="m")
    assert float(bf16[0]) == 1.0


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, None),
        (b"gzip", b"gzip"),
        (b"deflate;q=0.5, gzip;q=0.8", b"gzip"),
        (b"identity, gzip;q=0.5", None),
        (b"br", None),
        (b"gzip;q=0", None),
    ],
)
def test_accept_encoding_negotiation(header: bytes | None, chosen: bytes | None) -> None:
    assert choose_encoding(header) == chosen


def test_config_json_prints_int64_as_numbers() -> None:
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1, 3])
    config.dynamic_batching.max_queue_delay_microseconds = 100
    data = config_to_json(config)
    assert data["input"][0]["dims"] == [-1, 3]
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100


@pytest.mark.parametrize("shape", [[0, 2**40, 2**40], [2**31, 2**31, 2**2, 0], [2**62, 4]])
def test_a_shape_whose_dims_overflow_is_a_client_error_even_when_empty(shape: list[int]) -> None:
    header = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "BOOL", "data": []}]}
    with pytest.raises(InvalidArgumentError, match="element count of input 'INPUT0' overflows"):
        decode_json(header, memoryview(b""), model_name="m", model_version=None)
    message = service_pb2.ModelInferRequest(model_name="m")
    message.inputs.add(name="INPUT0", datatype="BOOL", shape=shape).contents.SetInParent()
    with pytest.raises(InvalidArgumentError, match="element count of input 'INPUT0' overflows"):
        decode_grpc(message)


def _grpc_request(*inputs: tuple[str, str, list[int]]) -> Any:
    message = service_pb2.ModelInferRequest(model_name="m")
    for name, datatype, shape in inputs:
        message.inputs.add(name=name, datatype=datatype, shape=shape)
        message.raw_input_contents.append(b"\0" * 4 * int(np.prod(shape)))
    return message


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ([("A", "FP32", [1, -2])], "input 'A' has a negative dimension"),
        ([("A", "FP33", [1, 2])], "invalid datatype 'FP33' for input 'A'"),
        ([("A", "FP32", [1, 2]), ("A", "FP32", [1, 2])], "input 'A' already exists in request"),
        ([("A", "FP32", [1, 2]), ("B", "FP32", [1, 3])], None),
    ],
)
def test_grpc_inputs_are_refused_by_name_or_decoded(
    inputs: list[tuple[str, str, list[int]]], match: str | None
) -> None:
    message = _grpc_request(*inputs)
    if match is None:
        request = decode_grpc(message)
        assert {n: a.shape for n, a in request.inputs.items()} == {"A": (1, 2), "B": (1, 3)}
        assert all(a.dtype == np.float32 for a in request.inputs.values())
        return
    with pytest.raises(InvalidArgumentError, match=match):
        decode_grpc(message)


def test_grpc_raw_contents_and_typed_contents_may_not_be_mixed() -> None:
    message = _grpc_request(("A", "FP32", [1]))
    message.inputs[0].contents.fp32_contents.append(1.0)
    with pytest.raises(InvalidArgumentError, match="contents field must not be specified .*'A'"):
        decode_grpc(message)
