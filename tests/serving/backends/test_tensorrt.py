"""The TensorRT backend: a plan needs a GPU; without one the load says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.backends import registry
from serving.backends.base import InstancePlacement
from serving.backends.tensorrt import TensorRTInstance
from serving.errors import UnavailableError

from .specs import spec_for

pytestmark = pytest.mark.embedded


def _plan_model(tmp_path: Path) -> Path:
    model_dir = tmp_path / "plan"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.plan").write_bytes(b"not really an engine")
    (model_dir / "config.pbtxt").write_text(
        'name: "plan" platform: "tensorrt_plan" max_batch_size: 8\n'
        'input { name: "INPUT0" data_type: TYPE_FP32 dims: [4] }\n'
        'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }\n'
    )
    return model_dir


def test_plan_without_a_gpu_is_unavailable_saying_a_gpu_is_required(tmp_path: Path) -> None:
    spec = spec_for(_plan_model(tmp_path))
    (instance,) = registry.create_instances(spec, cpu_count=2, gpu_count=0)
    assert isinstance(instance, TensorRTInstance)
    with pytest.raises(UnavailableError, match="require a GPU"):
        instance.load()


def test_gpu_placement_without_cuda_is_unavailable(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; this checks the no-GPU message")
    gpu = InstancePlacement(name="plan_0", kind="KIND_GPU")
    with pytest.raises(UnavailableError, match="require a GPU; no GPU is available"):
        TensorRTInstance(spec_for(_plan_model(tmp_path)), gpu).load()
