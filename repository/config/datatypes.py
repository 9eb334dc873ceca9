"""Data type names: config (``TYPE_FP32``), wire (``FP32``), numpy and ONNX element types.

The wire name of ``TYPE_STRING`` is ``BYTES``. ONNX element types are kept as plain integers
(``onnx.TensorProto`` values) so importing this module does not import ``onnx``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repository.config.errors import ConfigError

_DT = mc.DataType

# config enum value -> wire name
_WIRE_BY_CONFIG: dict[int, str] = {
    _DT.TYPE_BOOL: "BOOL",
    _DT.TYPE_UINT8: "UINT8",
    _DT.TYPE_UINT16: "UINT16",
    _DT.TYPE_UINT32: "UINT32",
    _DT.TYPE_UINT64: "UINT64",
    _DT.TYPE_INT8: "INT8",
    _DT.TYPE_INT16: "INT16",
    _DT.TYPE_INT32: "INT32",
    _DT.TYPE_INT64: "INT64",
    _DT.TYPE_FP16: "FP16",
    _DT.TYPE_FP32: "FP32",
    _DT.TYPE_FP64: "FP64",
    _DT.TYPE_STRING: "BYTES",
    _DT.TYPE_BF16: "BF16",
}
_CONFIG_BY_WIRE: dict[str, int] = {wire: dt for dt, wire in _WIRE_BY_CONFIG.items()}

# onnx.TensorProto element type -> config enum value
_CONFIG_BY_ONNX: dict[int, int] = {
    1: _DT.TYPE_FP32,  # FLOAT
    2: _DT.TYPE_UINT8,
    3: _DT.TYPE_INT8,
    4: _DT.TYPE_UINT16,
    5: _DT.TYPE_INT16,
    6: _DT.TYPE_INT32,
    7: _DT.TYPE_INT64,
    8: _DT.TYPE_STRING,
    9: _DT.TYPE_BOOL,
    10: _DT.TYPE_FP16,
    11: _DT.TYPE_FP64,  # DOUBLE
    12: _DT.TYPE_UINT32,
    13: _DT.TYPE_UINT64,
    16: _DT.TYPE_BF16,
}
_ONNX_BY_CONFIG: dict[int, int] = {dt: onnx_type for onnx_type, dt in _CONFIG_BY_ONNX.items()}

_NUMPY_BY_WIRE: dict[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BYTES": "object",
}

# Bytes per element; BYTES has no fixed size.
_ELEMENT_SIZE: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 1,
    "INT8": 1,
    "UINT16": 2,
    "INT16": 2,
    "FP16": 2,
    "BF16": 2,
    "UINT32": 4,
    "INT32": 4,
    "FP32": 4,
    "UINT64": 8,
    "INT64": 8,
    "FP64": 8,
}


def wire_datatype(data_type: int) -> str:
    """``TYPE_FP32`` -> ``"FP32"``; ``TYPE_STRING`` -> ``"BYTES"``."""
    try:
        return _WIRE_BY_CONFIG[data_type]
    except KeyError:
        raise ConfigError([f"data_type: invalid data type {data_type}"]) from None


def config_datatype(wire: str) -> int:
    """``"FP32"`` (or ``"TYPE_FP32"``, or ``"STRING"``) -> ``TYPE_FP32``."""
    name = wire.upper().removeprefix("TYPE_")
    if name == "STRING":
        name = "BYTES"
    try:
        return _CONFIG_BY_WIRE[name]
    except KeyError:
        raise ConfigError([f"data_type: unknown data type '{wire}'"]) from None


def config_datatype_name(data_type: int) -> str:
    """``TYPE_FP32`` enum value -> ``"TYPE_FP32"``."""
    return str(mc.DataType.Name(data_type))


def numpy_dtype(data_type: int | str) -> np.dtype[Any]:
    """The numpy dtype for a config enum value or wire name (BYTES -> object, BF16 -> ml_dtypes)."""
    wire = data_type if isinstance(data_type, str) else wire_datatype(data_type)
    wire = wire_datatype(config_datatype(wire))
    if wire == "BF16":
        import ml_dtypes  # only needed for bfloat16

        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(_NUMPY_BY_WIRE[wire])


def datatype_from_numpy(dtype: np.dtype[Any]) -> str:
    """Wire name for a numpy dtype (object, bytes and str arrays are BYTES)."""
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if dtype.name == "bfloat16":
        return "BF16"
    for wire, name in _NUMPY_BY_WIRE.items():
        if dtype == np.dtype(name):
            return wire
    raise ConfigError([f"data_type: numpy dtype {dtype} has no Triton data type"])


def element_size(data_type: int | str) -> int | None:
    """Bytes per element, or None for BYTES."""
    wire = data_type if isinstance(data_type, str) else wire_datatype(data_type)
    return _ELEMENT_SIZE.get(wire_datatype(config_datatype(wire)))


def config_datatype_from_onnx(elem_type: int) -> int | None:
    """``onnx.TensorProto`` element type -> config enum value; None when Triton has none."""
    return _CONFIG_BY_ONNX.get(elem_type)


def onnx_elem_type(data_type: int | str) -> int:
    """Config enum value or wire name -> ``onnx.TensorProto`` element type."""
    dt = config_datatype(data_type) if isinstance(data_type, str) else data_type
    return _ONNX_BY_CONFIG[dt]
