"""A large ``ModelInferRequest`` read in place (``serving.protocol.grpc.infer_wire``): decoded
exactly as protobuf's own parse would have it, whatever the fields and their order, its tensors
sharing the received bytes, and anything unexpected left to protobuf; and a large answer written
from its outputs' memory, unary or streamed, byte for byte what protobuf would have written."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from serving.core.types import InferRequest, InferResponse
from serving.errors import ServingError
from serving.protocol.grpc.infer_wire import (
    ZERO_COPY_FROM,
    SplitInferRequest,
    SplitInferResponse,
    parse_infer_request,
    serialize_infer_response,
    serialize_stream_infer_response,
)
from serving.protocol.grpc.registration import IN_PLACE_METHODS
from serving.protocol.grpc_codec import (
    decode_infer_request,
    encode_infer_response,
)

DTYPES = {"FP32": np.float32, "INT64": np.int64, "UINT8": np.uint8, "FP16": np.float16}


@st.composite
def wire_messages(draw: Any) -> bytes:
    """A request's bytes, field by field, in any order (protobuf reads serialized messages one
    after another as one message), sometimes with a field this schema does not know."""
    Request = service_pb2.ModelInferRequest  # noqa: N806 - a class
    pieces = [
        Request(model_name=draw(st.text(min_size=1, max_size=20))),
        Request(model_version=draw(st.sampled_from(["", "1", "12"]))),
        Request(id=draw(st.text(max_size=10))),
    ]
    for key in draw(st.lists(st.sampled_from(["a", "note", "priority"]), unique=True)):
        piece = Request()
        if key == "priority":
            piece.parameters[key].uint64_param = draw(st.integers(0, 9))
        else:
            piece.parameters[key].string_param = draw(st.text(max_size=30))
        pieces.append(piece)
    for index in range(draw(st.integers(1, 3))):
        datatype = draw(st.sampled_from([*DTYPES, "BYTES"]))
        count = draw(st.integers(0, 50))
        piece = Request()
        piece.inputs.add(name=f"INPUT{index}", datatype=datatype, shape=[1, count])
        pieces.append(piece)
        if datatype == "BYTES":
            items = draw(st.lists(st.binary(max_size=12), min_size=count, max_size=count))
            data = b"".join(len(item).to_bytes(4, "little") + item for item in items)
        else:
            size = count * np.dtype(DTYPES[datatype]).itemsize
            data = draw(st.binary(min_size=size, max_size=size))
        pieces.append(Request(raw_input_contents=[data]))
    for name in draw(st.lists(st.sampled_from(["OUTPUT0", "OUTPUT1"]), unique=True)):
        piece = Request()
        piece.outputs.add(name=name)
        pieces.append(piece)
    wire = [piece.SerializeToString() for piece in pieces]
    if draw(st.booleans()):
        wire.append(b"\xa8\x06\x2a")  # field 101, a varint: unknown to ModelInferRequest
    return b"".join(draw(st.permutations(wire)))


def decoded(message: Any) -> InferRequest | str:
    try:
        return decode_infer_request(message)
    except ServingError as error:
        return error.message


def same(left: InferRequest | str, right: InferRequest | str) -> None:
    if isinstance(left, str) or isinstance(right, str):
        assert left == right
        return
    assert (left.model_name, left.model_version, left.id, left.priority, left.parameters) == (
        right.model_name, right.model_version, right.id, right.priority, right.parameters
    )  # fmt: skip
    assert [o.name for o in left.outputs or []] == [o.name for o in right.outputs or []]
    assert list(left.inputs) == list(right.inputs)
    for name, array in left.inputs.items():
        assert array.dtype == right.inputs[name].dtype and array.shape == right.inputs[name].shape
        assert array.tobytes() == right.inputs[name].tobytes() or array.tolist() == (
            right.inputs[name].tolist()
        )


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(wire_messages())
def test_a_request_read_in_place_decodes_as_protobuf_reads_it(wire: bytes) -> None:
    pad = service_pb2.ModelInferRequest()
    pad.parameters["pad"].string_param = "x" * ZERO_COPY_FROM  # a large message
    padded = wire + pad.SerializeToString()
    in_place = parse_infer_request(padded)
    assert isinstance(in_place, SplitInferRequest)
    same(decoded(in_place), decoded(service_pb2.ModelInferRequest.FromString(padded)))


def test_a_large_tensor_shares_the_received_bytes_and_a_small_request_is_protobufs() -> None:
    x = np.arange(ZERO_COPY_FROM // 4, dtype=np.float32)
    message = service_pb2.ModelInferRequest(model_name="m", raw_input_contents=[x.tobytes()])
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, x.size])
    wire = message.SerializeToString()
    request = decode_infer_request(parse_infer_request(wire))
    array = request.inputs["INPUT0"]
    np.testing.assert_array_equal(array.ravel(), x)
    assert np.shares_memory(array, np.frombuffer(wire, np.uint8))  # no copy of it
    del message.raw_input_contents[:]
    message.raw_input_contents.append(x[:16].tobytes())
    message.inputs[0].shape[:] = [1, 16]
    small = parse_infer_request(message.SerializeToString())
    assert isinstance(small, service_pb2.ModelInferRequest)  # protobuf's parse, its copies


@pytest.mark.parametrize(
    ("case", "wire"),
    [
        ("cut short inside the contents", None),
        ("raw_input_contents as a varint", b"\x38\x05"),
        ("a group", b"\x0b\x0c"),
        ("a key cut short", b"\xff"),
        ("a length past the end", b"\x3a\xff\xff\xff\x0f"),
    ],
)
def test_what_the_walk_does_not_expect_is_left_to_protobuf(case: str, wire: bytes | None) -> None:
    x = np.ones(ZERO_COPY_FROM // 4, dtype=np.float32)
    message = service_pb2.ModelInferRequest(model_name="m", raw_input_contents=[x.tobytes()])
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, x.size])
    whole = message.SerializeToString()
    wire = whole[:-10] if wire is None else whole + wire
    try:
        expected: Any = service_pb2.ModelInferRequest.FromString(wire)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_infer_request(wire)
        return
    got = parse_infer_request(wire)
    assert not isinstance(got, SplitInferRequest), case
    same(decoded(got), decoded(expected))


@pytest.mark.parametrize("scale", [1, ZERO_COPY_FROM], ids=["small", "large"])
def test_an_answer_written_from_its_outputs_reads_as_protobufs_own(scale: int) -> None:
    wide = np.arange(scale // 8 + 3, dtype=np.float64)
    strided = np.arange(4 * (scale // 16 + 2), dtype=np.int32).reshape(-1, 4)[:, ::2]
    text = np.array([b"a", b"", b"xyz" * (scale // 64 + 1)], dtype=object)
    small = np.arange(3, dtype=np.uint8)  # before the large ones: written by protobuf
    response = InferResponse(model_name="m", model_version=3, id="r",
                             outputs={"S": small, "A": wide, "B": strided, "C": text},
                             parameters={"sequence_id": 7})  # fmt: skip
    answer = encode_infer_response(response, "ignored", in_place=True)
    assert isinstance(answer, SplitInferResponse) == (scale == ZERO_COPY_FROM)
    written = service_pb2.ModelInferResponse.FromString(serialize_infer_response(answer))
    assert written == encode_infer_response(response, "ignored")
    # On a stream a split answer stands for the stream answer holding it; a whole one is wrapped.
    stream_answer = (answer if isinstance(answer, SplitInferResponse)
                     else service_pb2.ModelStreamInferResponse(infer_response=answer))  # fmt: skip
    assert serialize_stream_infer_response(stream_answer) == (
        service_pb2.ModelStreamInferResponse(infer_response=written).SerializeToString()
    )
    assert written.raw_output_contents[0] == small.tobytes()
    assert np.frombuffer(written.raw_output_contents[1], "<f8").tolist() == wide.tolist()
    assert np.frombuffer(written.raw_output_contents[2], np.int32).tolist() == (
        strided.ravel().tolist()
    )


def test_a_large_request_with_typed_contents_only_is_protobufs() -> None:
    message = service_pb2.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, ZERO_COPY_FROM // 4])
    tensor.contents.fp32_contents.extend([0.5] * (ZERO_COPY_FROM // 4))
    parsed = parse_infer_request(message.SerializeToString())
    assert isinstance(parsed, service_pb2.ModelInferRequest)  # nothing to leave in place
    assert decode_infer_request(parsed).inputs["INPUT0"].tolist()[0][:2] == [0.5, 0.5]


def test_the_inference_rpcs_are_the_ones_read_in_place() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    taking_requests = {
        f"/{service.full_name}/{method.name}"
        for method in service.methods
        if method.input_type.name == "ModelInferRequest"
    }
    assert taking_requests == IN_PLACE_METHODS
