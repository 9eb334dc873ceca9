"""gRPC ``ModelInferRequest``/``ModelInferResponse`` <-> ``InferRequest``/``InferResponse``.

Inputs come as raw contents (binary layout of PROTOCOL.md §1.4) or typed ``contents``; outputs
always leave as ``raw_output_contents``, which is what tritonclient reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2

from serving.core.datatypes import (
    NUMPY_BY_WIRE,
    NumpyArray,
    add_bytes_elements,
    check_shape_span,
    element_count,
    tensor_buffer,
    tensor_from_bytes,
    tensor_to_bytes,
    wire_from_numpy,
)
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import InvalidArgumentError, UnsupportedError
from serving.protocol.grpc.infer_wire import (
    ZERO_COPY_FROM,
    SplitInferRequest,
    SplitInferResponse,
)
from serving.protocol.parameters import apply_request_parameters

_TYPED_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parse_version(text: str) -> int | None:
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):  # NOTE: int() refuses "¹", a digit
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}'"
        )
    return int(text)


def parameter_value(param: Any) -> Any:
    """The Python value of an ``InferParameter`` / ``ModelRepositoryParameter``."""
    kind = param.WhichOneof("parameter_choice")
    return None if kind is None else getattr(param, kind)


def decode_infer_request(
    message: service_pb2.ModelInferRequest | SplitInferRequest,
) -> InferRequest:
    """The request a message stands for; a large message's raw contents (``SplitInferRequest``)
    become tensors that share the received bytes."""
    if isinstance(message, SplitInferRequest):
        raw: Sequence[bytes | memoryview] = message.raw
        message = message.message
    else:
        raw = message.raw_input_contents
    model_name = message.model_name
    request = InferRequest(model_name=model_name, inputs={},
                           model_version=parse_version(message.model_version),
                           id=message.id)  # fmt: skip
    if message.parameters:
        params = {key: parameter_value(value) for key, value in message.parameters.items()}
        apply_request_parameters(request, params)
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgumentError(
            f"expected {len(message.inputs)} raw input contents but got {len(raw)} for model "
            f"'{model_name}'"
        )
    bytes_elements = 0
    inputs = request.inputs
    # NOTE: each field read of a protobuf message builds a new Python object: read each once.
    for index, tensor in enumerate(message.inputs):
        name, datatype = tensor.name, tensor.datatype
        shape = list(tensor.shape)
        if shape and min(shape) < 0:
            raise InvalidArgumentError(f"input '{name}' has a negative dimension")
        check_shape_span(shape, name=name)
        if datatype == "BYTES":
            bytes_elements = add_bytes_elements(bytes_elements, shape, model_name=model_name)
        if datatype not in NUMPY_BY_WIRE:
            raise InvalidArgumentError(f"invalid datatype '{datatype}' for input '{name}'")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model_name}'"
                )
            array = tensor_from_bytes(raw[index], datatype, shape, name=name,
                                      model_name=model_name)  # fmt: skip
        else:
            array = _typed_contents(tensor, shape, model_name)
        if name in inputs:
            raise InvalidArgumentError(f"input '{name}' already exists in request")
        inputs[name] = array
    if message.outputs:
        request.outputs = _requested_outputs(message)
    return request


def _typed_contents(
    tensor: service_pb2.ModelInferRequest.InferInputTensor, shape: list[int], model_name: str
) -> NumpyArray:
    field = _TYPED_FIELD.get(tensor.datatype)
    if field is None:
        raise InvalidArgumentError(
            f"{tensor.datatype} input '{tensor.name}' must be sent in raw_input_contents"
        )
    values = getattr(tensor.contents, field)
    count = element_count(shape)
    if len(values) != count:
        raise InvalidArgumentError(
            f"unexpected number of elements {len(values)} in contents of input '{tensor.name}' "
            f"for model '{model_name}', expecting {count}"
        )
    if tensor.datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    with np.errstate(over="ignore"):
        return np.asarray(values).astype(NUMPY_BY_WIRE[tensor.datatype]).reshape(shape)


def _requested_outputs(message: service_pb2.ModelInferRequest) -> list[RequestedOutput]:
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for tensor in message.outputs:
        if tensor.name in seen:
            raise InvalidArgumentError(f"output '{tensor.name}' already exists in request")
        seen.add(tensor.name)
        output = RequestedOutput(name=tensor.name)
        for key, param in tensor.parameters.items():
            value = parameter_value(param)
            if key == "classification":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidArgumentError(
                        f"output '{tensor.name}': 'classification' must be an unsigned integer"
                    )
                output.classification = value
            elif key.startswith("shared_memory"):
                raise UnsupportedError("shared memory is not supported by this server")
        outputs.append(output)
    return outputs


def encode_infer_response(
    response: InferResponse, request_id: str = "", *, in_place: bool = False
) -> service_pb2.ModelInferResponse | SplitInferResponse:
    """The answer's message. With ``in_place`` (an answer its handler writes with
    ``serialize_infer_response`` or ``serialize_stream_infer_response``) the outputs from the
    first large one on stay in their own memory, to be framed after the rest."""
    message = service_pb2.ModelInferResponse(
        model_name=response.model_name,
        model_version=str(response.model_version),
        id=response.id or request_id,
    )
    contents = message.raw_output_contents
    framed: list[bytes | memoryview] | None = None
    for name, array in response.outputs.items():
        message.outputs.add(name=name, datatype=wire_from_numpy(array.dtype), shape=array.shape)
        if framed is None and (not in_place or array.nbytes < ZERO_COPY_FROM):
            contents.append(tensor_to_bytes(array))
        elif framed is None:  # NOTE: every output after a large one too: they keep their order
            framed = [tensor_buffer(array)]
        else:
            framed.append(tensor_buffer(array))
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    return message if framed is None else SplitInferResponse(message, framed)


def set_parameter(param: Any, value: Any) -> None:
    if isinstance(value, np.generic):  # e.g. a Python model's numpy scalar
        value = value.item()
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = str(value)
