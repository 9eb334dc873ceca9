"""Wire datatypes (``FP32``, ``BYTES``...) and their numpy dtypes, for the request path.

Lookups are plain dicts so that decoding a tensor costs one hash lookup. BYTES tensors are numpy
object arrays of ``bytes``; BF16 uses ``ml_dtypes.bfloat16``. Binary BYTES layout
(PROTOCOL.md §1.4): per element a 4-byte little-endian length, then the bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import ml_dtypes
import numpy as np

from serving.errors import InvalidArgumentError

NumpyArray = np.ndarray[Any, Any]

# BYTES elements one request may carry, over all its inputs: each becomes a Python object, so 64 MiB
# of 4-byte empty elements would otherwise be 16 M objects.
MAX_BYTES_ELEMENTS = 1 << 20

NUMPY_BY_WIRE: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.dtype(object),
}
# Little-endian versions, for decoding wire bytes on any host.
_LE_BY_WIRE: dict[str, np.dtype[Any]] = {
    wire: dtype.newbyteorder("<") if dtype.itemsize > 1 and wire != "BYTES" else dtype
    for wire, dtype in NUMPY_BY_WIRE.items()
}
# The numeric dtypes' wire names (``wire_from_numpy`` without its call, for a hot loop).
WIRE_BY_NUMPY: dict[np.dtype[Any], str] = {
    dtype: wire for wire, dtype in NUMPY_BY_WIRE.items() if wire != "BYTES"
}

_LENGTH = struct.Struct("<I")


def wire_from_numpy(dtype: np.dtype[Any]) -> str:
    """The wire datatype of a numpy array's dtype (object, bytes and str arrays are BYTES)."""
    wire = WIRE_BY_NUMPY.get(dtype)
    if wire is not None:
        return wire
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    raise InvalidArgumentError(f"numpy dtype {dtype} has no Triton data type")


def numpy_from_wire(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of a wire datatype; an unknown name is a client error."""
    try:
        return NUMPY_BY_WIRE[datatype]
    except KeyError:
        raise InvalidArgumentError(f"invalid datatype '{datatype}'") from None


def element_count(shape: list[int] | tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


# NOTE: numpy refuses a shape whose non-zero dims multiply (times the item size) past its address
# space even when another dim is 0 and the tensor is empty, so the bound ignores zeros.
MAX_SHAPE_SPAN = 2**59


def check_shape_span(shape: list[int] | tuple[int, ...], *, name: str) -> None:
    """INVALID_ARG for a shape no tensor can have: its non-zero dims overflow, empty or not."""
    span = 1
    for dim in shape:
        span *= dim or 1
        if span > MAX_SHAPE_SPAN:
            raise InvalidArgumentError(f"element count of input '{name}' overflows")


def add_bytes_elements(total: int, shape: list[Any], *, model_name: str) -> int:
    """``total`` plus a BYTES input's element count; INVALID_ARG once past ``MAX_BYTES_ELEMENTS``.

    Called with the declared shape before the elements are decoded. A malformed shape is left to
    the decoder, which refuses it with its own message.
    """
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return total
    total += element_count(shape)
    if total > MAX_BYTES_ELEMENTS:
        raise InvalidArgumentError(
            f"request for model '{model_name}' has {total} BYTES elements, more than the "
            f"{MAX_BYTES_ELEMENTS} a request may carry"
        )
    return total


def tensor_from_bytes(
    raw: bytes | memoryview, datatype: str, shape: list[int], *, name: str, model_name: str
) -> NumpyArray:
    """Decode one tensor's raw (binary extension / gRPC raw contents) bytes."""
    count = element_count(shape)
    if datatype == "BYTES":
        return bytes_tensor_from_raw(raw, count, shape, name=name, model_name=model_name)
    dtype = _LE_BY_WIRE.get(datatype)
    if dtype is None:
        raise InvalidArgumentError(f"invalid datatype '{datatype}' for input '{name}'")
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise InvalidArgumentError(
            f"unexpected size for input '{name}', expecting {expected} bytes for model "
            f"'{model_name}', got {len(raw)} bytes"
        )
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


def bytes_tensor_from_raw(
    raw: bytes | memoryview, count: int, shape: list[int], *, name: str, model_name: str
) -> NumpyArray:
    """Parse length-prefixed BYTES elements; the element count must match the shape exactly."""
    view = memoryview(raw)
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if len(items) == count:  # NOTE: before building more objects than the shape allows
            raise InvalidArgumentError(
                f"unexpected number of string elements for inference input '{name}' of model "
                f"'{model_name}': more than the {count} its shape declares"
            )
        if offset + 4 > end:
            raise InvalidArgumentError(
                f"unexpected end of BYTES data for input '{name}' of model '{model_name}'"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidArgumentError(
                f"element of input '{name}' of model '{model_name}' claims {length} bytes "
                f"but only {end - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidArgumentError(
            f"unexpected number of string elements {len(items)} for inference input '{name}' "
            f"of model '{model_name}', expecting {count}"
        )
    array = np.empty(count, dtype=object)
    array[:] = items
    return array.reshape(shape)


def tensor_to_bytes(array: NumpyArray) -> bytes:
    """Raw little-endian bytes of a tensor; BYTES elements length-prefixed."""
    raw = tensor_buffer(array)
    return raw if isinstance(raw, bytes) else raw.tobytes()


def tensor_buffer(array: NumpyArray) -> bytes | memoryview:
    """``tensor_to_bytes`` without the copy where none is needed: a little-endian, contiguous
    numeric tensor is sent straight from its own memory (64 MiB copied on the event loop held
    every other request for 100 ms and more)."""
    if array.dtype.kind in ("O", "S", "U"):
        return serialize_bytes_elements(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    try:
        # NOTE: a C-contiguous tensor's own buffer as bytes, in one call rather than numpy's three.
        return array.data.cast("B")
    except (TypeError, ValueError):
        # Not C-contiguous, empty, or a dtype without a buffer format (bfloat16): numpy's way.
        return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def serialize_bytes_elements(array: NumpyArray) -> bytes:
    parts: list[bytes] = []
    for item in array.ravel():
        if isinstance(item, str):
            data = item.encode("utf-8")
        elif isinstance(item, bytes | bytearray | memoryview):
            data = bytes(item)
        else:
            data = str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)
