"""Data type names across config, wire, numpy and ONNX."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository.config import (
    ConfigError,
    config_datatype,
    config_datatype_from_onnx,
    config_datatype_name,
    datatype_from_numpy,
    element_size,
    numpy_dtype,
    onnx_elem_type,
    wire_datatype,
)

pytestmark = pytest.mark.embedded

ALL = [name for name, value in mc.DataType.items() if value != mc.TYPE_INVALID]


@pytest.mark.parametrize("name", ALL)
def test_every_type_round_trips(name: str) -> None:
    value = mc.DataType.Value(name)
    wire = wire_datatype(value)
    assert config_datatype(wire) == value
    assert config_datatype_name(value) == name
    assert config_datatype_from_onnx(onnx_elem_type(value)) == value
    assert datatype_from_numpy(numpy_dtype(value)) == wire


def test_string_is_bytes_on_the_wire() -> None:
    assert wire_datatype(mc.TYPE_STRING) == "BYTES"
    assert config_datatype("STRING") == config_datatype("TYPE_STRING") == mc.TYPE_STRING
    assert numpy_dtype("BYTES") == np.dtype(object)
    assert datatype_from_numpy(np.array(["a"]).dtype) == "BYTES"
    assert element_size("BYTES") is None and element_size(mc.TYPE_FP16) == 2


def test_unknown_types_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown data type 'FLOAT'"):
        config_datatype("FLOAT")
    with pytest.raises(ConfigError):
        wire_datatype(99)
    with pytest.raises(ConfigError):
        datatype_from_numpy(np.dtype("complex64"))
    assert config_datatype_from_onnx(14) is None  # COMPLEX64
