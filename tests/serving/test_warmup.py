"""Warm-up: config ``model_warmup`` entries and the generated request."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from repository import demo_models
from serving.backends.base import InstancePlacement
from serving.backends.onnxruntime import OnnxRuntimeInstance
from serving.errors import UnavailableError
from serving.warmup import generated_request, run_warmup, warmup_request

from .backends.specs import spec_for

pytestmark = pytest.mark.embedded

CPU = InstancePlacement(name="m_0", kind="KIND_CPU")


def _instance(spec):  # type: ignore[no-untyped-def]
    instance = OnnxRuntimeInstance(spec, CPU)
    instance.load()
    return instance


def test_config_warmup_entries_run_count_times_on_every_instance(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path, dtype="FP32")
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "in0").write_bytes(np.ones(32, np.float32).tobytes())
    spec = spec_for(
        model_dir,
        edit="""
        model_warmup [{ name: "zeros" batch_size: 2 count: 3
          inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [16] zero_data: true } }
          inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [16] random_data: true } } },
        { name: "file" batch_size: 2
          inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [16] input_data_file: "in0" } }
          inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [16] zero_data: true } } }]
        """,
    )
    instances = [_instance(spec), _instance(spec)]
    assert run_warmup(spec, instances) == 8
    request = warmup_request(spec, spec.config.model_warmup[1])
    assert request.inputs["INPUT0"].shape == (2, 16) and request.inputs["INPUT0"].sum() == 32


def test_failing_config_warmup_fails_the_load(tmp_path: Path) -> None:
    spec = spec_for(
        demo_models.write_onnx_add_sub(tmp_path, dtype="FP32"),
        edit="""model_warmup [{ name: "bad" batch_size: 1
          inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [3] zero_data: true } }
          inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [3] zero_data: true } } }]""",
    )
    with pytest.raises(UnavailableError, match="model warmup 'bad' of model 'simple'"):
        run_warmup(spec, [_instance(spec)])


def test_missing_warmup_file_is_named(tmp_path: Path) -> None:
    spec = spec_for(
        demo_models.write_onnx_identity(tmp_path),
        edit="""model_warmup [{ name: "f" batch_size: 1
          inputs { key: "INPUT0"
                   value { data_type: TYPE_FP32 dims: [2] input_data_file: "x" } } }]""",
    )
    with pytest.raises(UnavailableError, match="warmup data file 'x' not found"):
        run_warmup(spec, [_instance(spec)])


def test_bytes_warmup_file_is_length_prefixed(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path, dtype="BYTES")
    (model_dir / "warmup").mkdir()
    raw = b"".join(struct.pack("<I", len(s)) + s for s in (b"ab", b"c"))
    (model_dir / "warmup" / "s").write_bytes(raw)
    spec = spec_for(
        model_dir,
        edit="""model_warmup [{ name: "s" batch_size: 1
          inputs { key: "INPUT0"
                   value { data_type: TYPE_STRING dims: [2] input_data_file: "s" } } }]""",
    )
    assert warmup_request(spec, spec.config.model_warmup[0]).inputs["INPUT0"].tolist() == [
        [b"ab", b"c"]
    ]
    assert run_warmup(spec, [_instance(spec)]) == 1


def test_model_without_entries_gets_a_generated_request(tmp_path: Path) -> None:
    spec = spec_for(demo_models.write_onnx_add_sub(tmp_path, dtype="INT32"))
    request = generated_request(spec, random=True)
    assert request.inputs["INPUT0"].shape == (1, 16) and request.inputs["INPUT0"].dtype == np.int32
    assert run_warmup(spec, [_instance(spec)]) == 1


def test_sequence_models_get_no_generated_request(tmp_path: Path) -> None:
    spec = spec_for(demo_models.write_onnx_identity(tmp_path), edit="sequence_batching {}")
    assert run_warmup(spec, [_instance(spec)]) == 0
