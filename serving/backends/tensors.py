"""Tensor facts every backend needs: config data types as numpy dtypes and wire names, and the
request checks that let one bad request fail alone instead of failing its batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from serving.core.types import InferRequest
from serving.errors import InvalidArgumentError

# Accepted (name, dtype, shape) triples a RequestChecker remembers before it starts again.
MAX_ACCEPTED_TENSORS = 256

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
    if len(shape) != len(expected):
        return False
    for size, want in zip(shape, expected, strict=True):
        if want != -1 and size != want:
            return False
    return True


class RequestChecker:
    """Checks requests against a config's inputs; built once per loaded version (hot path)."""

    def __init__(self, config: model_config_pb2.ModelConfig) -> None:
        self.model = config.name
        self.max_batch_size = config.max_batch_size
        self.rules = {
            i.name: (numpy_dtype(i.data_type), tuple(full_shape(i.dims, config.max_batch_size)))
            for i in config.input
        }
        self.wire = {i.name: wire_datatype(i.data_type) for i in config.input}
        self.required = tuple(i.name for i in config.input if not i.optional)
        self._required = frozenset(self.required)
        # Tensors the sequence batcher adds (control and implicit state) are not config inputs.
        sequence = config.sequence_batching
        self.injected = frozenset(
            [c.name for c in sequence.control_input] + [s.input_name for s in sequence.state]
        )
        # (name, dtype, shape) of inputs that passed, bounded: shapes with variable dims vary.
        self._accepted: set[tuple[str, np.dtype[Any], tuple[int, ...]]] = set()

    def check(self, request: InferRequest) -> None:
        """Raise InvalidArgumentError when a request cannot run (names, types, shapes)."""
        inputs = request.inputs
        accepted = self._accepted
        for name, array in inputs.items():
            # NOTE: the rules depend on nothing else, so a (name, dtype, shape) that passed once
            # passes again: requests of one client repeat them, and this runs on every request.
            key = (name, array.dtype, array.shape)
            if key in accepted:
                continue
            self._check_input(name, array)
            if len(accepted) >= MAX_ACCEPTED_TENSORS:
                accepted.clear()
            accepted.add(key)
        if not self._required.issubset(inputs.keys()):
            self._refuse_missing(inputs)

    def _check_input(self, name: str, array: np.ndarray) -> None:
        rule = self.rules.get(name)
        if rule is None:
            if name in self.injected:
                return
            raise InvalidArgumentError(
                f"unexpected inference input '{name}' for model '{self.model}'"
            )
        dtype, expected = rule
        if array.dtype != dtype and not (dtype.kind == "O" and array.dtype.kind in "SU"):
            raise InvalidArgumentError(
                f"inference input '{name}' data-type is '{wire_datatype_of(array)}', but "
                f"model '{self.model}' expects '{self.wire[name]}'"
            )
        if not shape_matches(array.shape, expected):
            raise InvalidArgumentError(
                f"unexpected shape for input '{name}' for model '{self.model}'. "
                f"Expected {list(expected)}, got {list(array.shape)}"
            )

    def _refuse_missing(self, inputs: dict[str, np.ndarray]) -> None:
        missing = [n for n in self.required if n not in inputs]
        raise InvalidArgumentError(
            f"expected {len(self.rules)} inputs but got {len(inputs)} inputs for model "
            f"'{self.model}'. Got input(s) {sorted(inputs)}, but missing required "
            f"input(s) {missing}. Please provide all required input(s)."
        )


def check_request(request: InferRequest, config: model_config_pb2.ModelConfig) -> None:
    """Raise InvalidArgumentError when a request cannot run on this model (names, types, shapes)."""
    RequestChecker(config).check(request)
