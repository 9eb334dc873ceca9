"""Backends by name, lazily imported, and instance placement with thread sizing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from repository import demo_models
from serving.backends import registry
from serving.backends.onnxruntime import OnnxRuntimeInstance
from serving.errors import UnsupportedError

from .specs import spec_for

pytestmark = pytest.mark.embedded


def _config(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse('name: "m" ' + text, model_config_pb2.ModelConfig())


def test_importing_the_registry_imports_no_runtime() -> None:
    code = (
        "import sys, serving.backends.registry as r; "
        "heavy = [m for m in ('torch', 'onnxruntime', 'tensorrt') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_onnx_model_does_not_import_torch() -> None:
    code = (
        "import sys, serving.backends.registry as r; r.instance_class('onnxruntime'); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_backend_is_chosen_from_backend_or_platform() -> None:
    assert registry.backend_name(_config('platform: "onnxruntime_onnx"')) == "onnxruntime"
    assert registry.backend_name(_config('platform: "pytorch_libtorch"')) == "pytorch"
    assert registry.backend_name(_config('platform: "tensorrt_plan"')) == "tensorrt"
    assert registry.backend_name(_config('backend: "python"')) == "python"
    with pytest.raises(UnsupportedError, match="tensorflow_savedmodel"):
        registry.backend_name(_config('platform: "tensorflow_savedmodel"'))
    with pytest.raises(UnsupportedError, match="backend 'openvino' is not supported"):
        registry.instance_class("openvino")


def test_two_cpu_instances_on_two_cores_get_one_thread_each() -> None:
    config = _config("instance_group [{ kind: KIND_CPU count: 2 }]")
    placements = registry.plan_placements(config, cpu_count=2, gpu_count=0)
    assert [(p.name, p.kind, p.intra_op_threads) for p in placements] == [
        ("m_0_0", "KIND_CPU", 1),
        ("m_0_1", "KIND_CPU", 1),
    ]


def test_one_instance_gets_every_core_and_parameters_override() -> None:
    assert registry.plan_placements(_config(""), cpu_count=8, gpu_count=0)[0].intra_op_threads == 8
    config = _config(
        "instance_group [{ count: 3 kind: KIND_CPU }] "
        'parameters { key: "intra_op_thread_count" value { string_value: "2" } }'
    )
    placements = registry.plan_placements(config, cpu_count=2, gpu_count=0)
    assert [p.intra_op_threads for p in placements] == [2, 2, 2]


def test_gpu_groups_place_count_instances_per_listed_gpu() -> None:
    config = _config('instance_group [{ name: "g" kind: KIND_GPU count: 2 gpus: [0, 1] }]')
    placements = registry.plan_placements(config, cpu_count=16, gpu_count=2)
    assert [(p.name, p.kind, p.device_id) for p in placements] == [
        ("g_0", "KIND_GPU", 0),
        ("g_1", "KIND_GPU", 0),
        ("g_2", "KIND_GPU", 1),
        ("g_3", "KIND_GPU", 1),
    ]
    assert all(p.intra_op_threads == 4 for p in placements)


def test_auto_kind_resolves_to_cpu_without_gpus_and_gpu_with() -> None:
    config = _config("instance_group [{ kind: KIND_AUTO }]")
    assert registry.plan_placements(config, cpu_count=2, gpu_count=0)[0].kind == "KIND_CPU"
    assert registry.plan_placements(config, cpu_count=2, gpu_count=1)[0].kind == "KIND_GPU"


def test_create_instances_builds_unloaded_instances_of_the_backend(tmp_path: Path) -> None:
    spec = spec_for(
        demo_models.write_onnx_identity(tmp_path),
        edit="instance_group [{ kind: KIND_CPU count: 2 }]",
    )
    instances = registry.create_instances(spec, cpu_count=2, gpu_count=0)
    assert len(instances) == 2 and all(isinstance(i, OnnxRuntimeInstance) for i in instances)
    registry.load_instances(instances)
    for instance in instances:
        instance.unload()


def test_ensembles_have_no_instances(tmp_path: Path) -> None:
    model_dir = tmp_path / "ens"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('name: "ens" platform: "ensemble"')
    assert registry.create_instances(spec_for(model_dir), cpu_count=2, gpu_count=0) == []
