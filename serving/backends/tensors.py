"""Tensor facts every backend needs: config data types as numpy dtypes and wire names, and the
request checks that let one bad request fail alone instead of failing its batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2

from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

try:  # ml_dtypes ships with the project; guard so a stripped install still imports.
    from ml_dtypes import bfloat16 as _bfloat16

    BF16_DTYPE: np.dtype | None = np.dtype(_bfloat16)
except ImportError:  # pragma: no cover
    BF16_DTYPE = None

_CONFIG_TO_NUMPY: dict[str, np.dtype] = {
    "TYPE_BOOL": np.dtype(np.bool_),
    "TYPE_UINT8": np.dtype(np.uint8),
    "TYPE_UINT16": np.dtype(np.uint16),
    "TYPE_UINT32": np.dtype(np.uint32),
    "TYPE_UINT64": np.dtype(np.uint64),
    "TYPE_INT8": np.dtype(np.int8),
    "TYPE_INT16": np.dtype(np.int16),
    "TYPE_INT32": np.dtype(np.int32),
    "TYPE_INT64": np.dtype(np.int64),
    "TYPE_FP16": np.dtype(np.float16),
    "TYPE_FP32": np.dtype(np.float32),
    "TYPE_FP64": np.dtype(np.float64),
    "TYPE_STRING": np.dtype(object),
}
if BF16_DTYPE is not None:
    _CONFIG_TO_NUMPY["TYPE_BF16"] = BF16_DTYPE


def config_type_name(data_type: int) -> str:
    """``model_config_pb2.TYPE_FP32`` -> ``"TYPE_FP32"``."""
    return str(model_config_pb2.DataType.Name(data_type))


def numpy_dtype(data_type: int | str) -> np.dtype:
    """The numpy dtype of a config data type (enum value or ``"TYPE_X"`` name)."""
    name = data_type if isinstance(data_type, str) else config_type_name(data_type)
    try:
        return _CONFIG_TO_NUMPY[name]
    except KeyError:
        raise InvalidArgumentError(f"unsupported data type {name}") from None


def wire_datatype(data_type: int | str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    name = data_type if isinstance(data_type, str) else config_type_name(data_type)
    return "BYTES" if name == "TYPE_STRING" else name.removeprefix("TYPE_")


def config_type_from_wire(datatype: str) -> str:
    """``FP32`` -> ``TYPE_FP32``; ``BYTES`` -> ``TYPE_STRING``."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def wire_datatype_of(array: np.ndarray) -> str:
    """The wire datatype of an array (object and bytes arrays are BYTES)."""
    if array.dtype == object or array.dtype.kind in ("S", "U"):
        return "BYTES"
    if BF16_DTYPE is not None and array.dtype == BF16_DTYPE:
        return "BF16"
    for name, dtype in _CONFIG_TO_NUMPY.items():
        if dtype == array.dtype:
            return wire_datatype(name)
    raise InvalidArgumentError(f"unsupported numpy dtype {array.dtype}")


def full_shape(dims: Sequence[int], max_batch_size: int) -> list[int]:
    """The shape a request must have: ``[-1] + dims`` for a batching model, ``dims`` otherwise."""
    return ([-1] if max_batch_size > 0 else []) + [int(d) for d in dims]


def shape_matches(shape: Sequence[int], expected: Sequence[int]) -> bool:
    return len(shape) == len(expected) and all(
        e == -1 or s == e for s, e in zip(shape, expected, strict=True)
    )


def check_request(request: InferRequest, config: model_config_pb2.ModelConfig) -> None:
    """Raise InvalidArgumentError when a request cannot run on this model (names, types, shapes)."""
    declared = {i.name: i for i in config.input}
    missing = [n for n, i in declared.items() if n not in request.inputs and not i.optional]
    unknown = [n for n in request.inputs if n not in declared]
    if unknown:
        raise InvalidArgumentError(
            f"unexpected inference input '{unknown[0]}' for model '{config.name}'"
        )
    if missing:
        raise InvalidArgumentError(
            f"expected {len(declared)} inputs but got {len(request.inputs)} inputs for model "
            f"'{config.name}'. Got input(s) {sorted(request.inputs)}, but missing required "
            f"input(s) {missing}. Please provide all required input(s)."
        )
    for name, array in request.inputs.items():
        spec = declared[name]
        expected_dtype = numpy_dtype(spec.data_type)
        if array.dtype != expected_dtype and not (
            expected_dtype.kind == "O" and array.dtype.kind in ("S", "U")
        ):
            raise InvalidArgumentError(
                f"inference input '{name}' data-type is '{wire_datatype_of(array)}', but model "
                f"'{config.name}' expects '{wire_datatype(spec.data_type)}'"
            )
        expected = full_shape(spec.dims, config.max_batch_size)
        if not shape_matches(array.shape, expected):
            raise InvalidArgumentError(
                f"unexpected shape for input '{name}' for model '{config.name}'. "
                f"Expected {expected}, got {list(array.shape)}"
            )
