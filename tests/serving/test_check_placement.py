"""Where a validation worker loads a candidate: what it checks on the CPU, what it leaves open."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository.config import parse_config_text
from serving.check_placement import check_placement

pytestmark = pytest.mark.embedded

IO = (
    'input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } '
    'output { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } '
)
ONNX = 'name: "m" platform: "onnxruntime_onnx" backend: "onnxruntime" max_batch_size: 8 ' + IO


def _kinds(config: mc.ModelConfig | None) -> list[tuple[str, int]]:
    assert config is not None
    kind = mc.ModelInstanceGroup.Kind
    return [(kind.Name(g.kind), g.count) for g in config.instance_group]


def test_kind_gpu_onnx_is_checked_on_one_cpu_instance_and_left_pending() -> None:
    text = ONNX + "instance_group { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }"
    placed = check_placement(parse_config_text(text), gpu_count=0)
    assert _kinds(placed.config) == [("KIND_CPU", 1)]
    assert placed.pending.startswith("this validation worker: no NVIDIA GPU is visible")


def test_a_gpu_accelerator_is_left_pending_even_for_kind_auto() -> None:
    text = ONNX + (
        'optimization { execution_accelerators { gpu_execution_accelerator { name: "tensorrt" } } }'
    )
    placed = check_placement(parse_config_text(text), gpu_count=0)
    assert _kinds(placed.config) == [("KIND_CPU", 1)]
    assert placed.pending


def test_kind_auto_leaves_nothing_pending() -> None:
    placed = check_placement(parse_config_text(ONNX + "instance_group { }"), gpu_count=0)
    assert _kinds(placed.config) == [("KIND_CPU", 2)]
    assert placed.pending == ""


def test_a_tensorrt_plan_cannot_load_without_a_gpu_and_is_left_pending() -> None:
    text = 'name: "p" platform: "tensorrt_plan" max_batch_size: 8 ' + IO
    placed = check_placement(parse_config_text(text), gpu_count=0)
    assert placed.config is None
    assert placed.pending.startswith("TensorRT plans load only on a GPU")
