"""KServe v2 JSON (plus binary tensor extension data) <-> ``InferRequest``/``InferResponse``.

The HTTP transport hands over the parsed JSON header and the bytes after it; this module turns them
into numpy tensors and back. Error texts follow PROTOCOL.md §1.2-1.4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from serving.core.datatypes import (
    NUMPY_BY_WIRE,
    WIRE_BY_NUMPY,
    NumpyArray,
    add_bytes_elements,
    check_shape_span,
    element_count,
    tensor_buffer,
    tensor_from_bytes,
    wire_from_numpy,
)
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import InternalError, InvalidArgumentError, UnsupportedError
from serving.protocol.parameters import apply_request_parameters

_INT_KINDS = ("i", "u")
MAX_JSON_DEPTH = 100
# The "data" array of an input sits this deep in the request document.
_DATA_DEPTH = 3
# numpy handles at most 64 dimensions; deeper (legal) nesting is flattened by hand first.
_NUMPY_MAX_NESTING = 32
_FLOAT_OK_KINDS = ("i", "u", "f")


def parse_json(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    try:
        header = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(header, dict):
        raise InvalidArgumentError("failed to parse the request JSON buffer: expected an object")
    return header


def decode_infer_request(
    header: dict[str, Any], binary: memoryview, *, model_name: str, model_version: int | None
) -> InferRequest:
    """Build the request from its JSON header and the binary section that followed it."""
    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise InvalidArgumentError("inference request must contain an 'inputs' array")
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidArgumentError("'id' must be a string")
    request = InferRequest(model_name=model_name, inputs={}, model_version=model_version,
                           id=request_id)  # fmt: skip
    parameters = header.get("parameters")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise InvalidArgumentError("'parameters' must be an object")
        apply_request_parameters(request, parameters)
    offset = bytes_elements = 0
    for item in inputs_json:
        if isinstance(item, dict) and item.get("datatype") == "BYTES":
            shape = item.get("shape")
            if isinstance(shape, list):
                bytes_elements = add_bytes_elements(bytes_elements, shape, model_name=model_name)
        name, array, offset = _decode_input(item, binary, offset, model_name)
        if name in request.inputs:
            raise InvalidArgumentError(f"input '{name}' already exists in request")
        request.inputs[name] = array
    if offset != len(binary):
        raise InvalidArgumentError(f"unexpected additional input data for model '{model_name}'")
    outputs_json = header.get("outputs")
    if outputs_json is not None:
        request.outputs = decode_requested_outputs(outputs_json)
    return request


def decode_requested_outputs(outputs_json: Any) -> list[RequestedOutput]:
    if not isinstance(outputs_json, list):
        raise InvalidArgumentError("'outputs' must be an array")
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for item in outputs_json:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError("each requested output must be an object with a 'name'")
        name = item["name"]
        if name in seen:
            raise InvalidArgumentError(f"output '{name}' already exists in request")
        seen.add(name)
        output = RequestedOutput(name=name)
        params = item.get("parameters") or {}
        if not isinstance(params, dict):
            raise InvalidArgumentError(f"'parameters' of output '{name}' must be an object")
        for key, value in params.items():
            if key == "binary_data" and isinstance(value, bool):
                output.binary_data = value  # NOTE: the common parameter, without a call
            else:
                _apply_output_parameter(output, key, value)
        outputs.append(output)
    return outputs


def _apply_output_parameter(output: RequestedOutput, key: str, value: Any) -> None:
    if key == "binary_data":
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"output '{output.name}': 'binary_data' must be a boolean")
        output.binary_data = value
    elif key == "classification":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(
                f"output '{output.name}': 'classification' must be an unsigned integer"
            )
        output.classification = value
    elif key.startswith("shared_memory"):
        raise UnsupportedError("shared memory is not supported by this server")


def _decode_input(
    item: Any, binary: memoryview, offset: int, model_name: str
) -> tuple[str, NumpyArray, int]:
    if not isinstance(item, dict):
        raise InvalidArgumentError("each input must be an object")
    name = item.get("name")
    datatype = item.get("datatype")
    if not isinstance(name, str) or not isinstance(datatype, str):
        raise InvalidArgumentError("each input must have a string 'name' and 'datatype'")
    shape = _parse_shape(item.get("shape"), name)
    params = item.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidArgumentError(f"'parameters' of input '{name}' must be an object")
    if datatype not in NUMPY_BY_WIRE:
        raise InvalidArgumentError(f"invalid datatype '{datatype}' for input '{name}'")
    binary_size = params.get("binary_data_size")
    has_data = "data" in item
    if (binary_size is not None) + has_data + ("shared_memory_region" in params) != 1:
        raise InvalidArgumentError(
            f"Input '{name}' must set only one of the following fields: 'data', "
            "'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'"
        )
    if "shared_memory_region" in params:
        raise UnsupportedError("shared memory is not supported by this server")
    if binary_size is not None:
        if isinstance(binary_size, bool) or not isinstance(binary_size, int) or binary_size < 0:
            raise InvalidArgumentError(f"'binary_data_size' of input '{name}' must be an integer")
        if offset + binary_size > len(binary):
            raise InvalidArgumentError(
                f"unexpected size for input '{name}': binary_data_size {binary_size} exceeds "
                f"the {len(binary) - offset} bytes remaining in the request body"
            )
        raw = binary[offset : offset + binary_size]
        array = tensor_from_bytes(raw, datatype, shape, name=name, model_name=model_name)
        return name, array, offset + binary_size
    return name, tensor_from_json(item["data"], datatype, shape, name=name), offset


def _parse_shape(value: Any, name: str) -> list[int]:
    # NOTE: Triton answers shape type errors with INTERNAL (500); clients' tests expect it.
    if not isinstance(value, list):
        raise InternalError(f"Unable to parse 'shape': attempt to access non-existing array "
                            f"for input '{name}'")  # fmt: skip
    for dim in value:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
            raise InternalError(f"Unable to parse 'shape': attempt to access JSON non-unsigned "
                                f"integer as unsigned integer for input '{name}'")  # fmt: skip
    check_shape_span(value, name=name)
    return value


def tensor_from_json(data: Any, datatype: str, shape: list[int], *, name: str) -> NumpyArray:
    """A tensor from JSON ``data`` (flat or nested), with Triton's no-coercion typing rules."""
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input {name}"
        )
    count = element_count(shape)
    depth = _nesting(data)
    if depth + _DATA_DEPTH > MAX_JSON_DEPTH:
        raise InvalidArgumentError(
            f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH})"
        )
    if datatype == "BYTES":
        array = _bytes_from_json(data, name)
    else:
        array = _numbers_from_json(data, datatype, name)
    if array.size != count:
        raise InvalidArgumentError(
            f"Failed to parse 'data' field: shape does not match true shape of input '{name}': "
            f"expected {count} elements, got {array.size}"
        )
    return array.reshape(shape)


def _nesting(data: Any) -> int:
    depth = 0
    while isinstance(data, list):
        depth += 1
        data = data[0] if data else None
    return depth


def _flatten(data: Any) -> list[Any]:
    flat: list[Any] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    return flat


def _numbers_from_json(data: Any, datatype: str, name: str) -> NumpyArray:
    target = NUMPY_BY_WIRE[datatype]
    if _nesting(data) > _NUMPY_MAX_NESTING:
        data = _flatten(data)
    try:
        array = np.asarray(data)
    except (ValueError, OverflowError):
        array = np.asarray(data, dtype=object)
    kind = array.dtype.kind
    if array.size == 0:
        return array.astype(target).reshape(-1)
    allowed = (
        ("b",) if datatype == "BOOL" else _FLOAT_OK_KINDS if target.kind == "f" else _INT_KINDS
    )
    if kind == "O" and datatype != "BOOL":
        try:
            return np.array(data, dtype=target).reshape(-1)
        except (ValueError, TypeError, OverflowError):
            pass
    if kind not in allowed:
        expected = (
            "boolean" if datatype == "BOOL" else "number" if target.kind == "f" else "integer"
        )
        raise InvalidArgumentError(
            f"Unable to parse 'data': expected {expected} values for {datatype} input '{name}'"
        )
    with np.errstate(over="ignore"):
        return array.astype(target).reshape(-1)


def _bytes_from_json(data: Any, name: str) -> NumpyArray:
    flat: list[bytes] = []
    stack = [data] if not isinstance(data, list) else list(reversed(data))
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            flat.append(item.encode("utf-8"))
        else:
            raise InvalidArgumentError(
                f"Unable to parse 'data': expected string values for BYTES input '{name}'"
            )
    array = np.empty(len(flat), dtype=object)
    array[:] = flat
    return array


def encode_infer_response(
    response: InferResponse, request: InferRequest
) -> tuple[bytes, list[bytes | memoryview], bool]:
    """The response JSON, the raw parts following it, and whether any output is binary.

    A numeric part is a view of its output's own memory, not a copy (``tensor_buffer``)."""
    flags: dict[str, bool | None] = {}
    wanted = request.outputs
    if wanted is not None:
        if len(wanted) == 1:  # NOTE: the common case, without a comprehension
            flags = {wanted[0].name: wanted[0].binary_data}
        else:
            flags = {o.name: o.binary_data for o in wanted}
    default_binary = request.binary_data_output
    outputs: list[dict[str, Any]] = []
    parts: list[bytes | memoryview] = []
    any_binary = False
    for name, array in response.outputs.items():
        datatype = WIRE_BY_NUMPY.get(array.dtype) or wire_from_numpy(array.dtype)
        flag = flags.get(name)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if default_binary if flag is None else flag:
            raw = tensor_buffer(array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            any_binary = True
            if raw:
                parts.append(raw)
        else:
            entry["data"] = tensor_to_json(array, datatype, name)
        outputs.append(entry)
    body: dict[str, Any] = {}
    if response.id or request.id:
        body["id"] = response.id or request.id
    body["model_name"] = response.model_name
    body["model_version"] = str(response.model_version)
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    # NOTE: response parameters set by Python models may hold numpy scalars.
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), parts, any_binary


def tensor_to_json(array: NumpyArray, datatype: str, name: str) -> list[Any]:
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {datatype} data via JSON is not supported. Please use the binary data "
            f"format for output {name}"
        )
    if datatype == "BYTES":
        return [
            item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
            for item in array.ravel()
        ]
    values: list[Any] = array.ravel().tolist()
    return values
