"""The TensorRT backend: a plan needs a GPU (without one the load says so); on a GPU a plan built
with a dynamic-batch optimisation profile runs batches within it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repository import demo_models
from serving.backends import registry
from serving.backends.base import InstancePlacement
from serving.backends.tensorrt import ProfileShapes, TensorRTInstance, batch_problems, shape_problem
from serving.core.types import InferRequest, InferResponse
from serving.errors import UnavailableError
from tests.gpu_requirement import require_gpu, torch_cuda_missing

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


PROFILE = ProfileShapes(min=(1, 8), opt=(4, 8), max=(8, 8))


def test_shapes_inside_the_profile_run_and_others_are_named_with_its_bounds() -> None:
    assert shape_problem("INPUT0", (8, 8), PROFILE) == ""
    assert shape_problem("INPUT0", (9, 8), PROFILE) == (
        "input 'INPUT0': shape [9, 8] is outside the engine's optimisation profile "
        "(min [1, 8], max [8, 8])"
    )
    assert shape_problem("INPUT0", (2, 8, 1), PROFILE)


def test_a_max_batch_size_the_profile_cannot_take_is_a_load_problem() -> None:
    assert batch_problems({"INPUT0": PROFILE}, 8, 0) == []
    assert batch_problems({"INPUT0": PROFILE}, 16, 1) == [
        "input 'INPUT0': max_batch_size 16 exceeds the batch dimension of optimisation "
        "profile 1 (at most 8)"
    ]


def _build_plan(tmp_path: Path, max_batch_size: int) -> Path:
    """An MLP (8 -> 4) built into a TensorRT plan with one profile: batch 1..8, tuned for 4."""
    import tensorrt as trt

    onnx_dir = demo_models.write_onnx_mlp(tmp_path / "onnx", "mlp", sizes=(8, 16, 4))
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse((onnx_dir / "1" / "model.onnx").read_bytes())
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 28)
    profile = builder.create_optimization_profile()
    profile.set_shape("INPUT0", PROFILE.min, PROFILE.opt, PROFILE.max)
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    model_dir = tmp_path / "plan"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.plan").write_bytes(bytes(plan))
    (model_dir / "config.pbtxt").write_text(
        f'name: "plan" platform: "tensorrt_plan" max_batch_size: {max_batch_size}\n'
        'input { name: "INPUT0" data_type: TYPE_FP32 dims: [8] }\n'
        'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }\n'
    )
    return model_dir


@pytest.mark.gpu
def test_plan_with_a_dynamic_batch_profile_runs_batches_like_onnx_runtime(tmp_path: Path) -> None:
    require_gpu(torch_cuda_missing() or TensorRTInstance.gpu_unusable_reason())
    model_dir = _build_plan(tmp_path, max_batch_size=8)
    (instance,) = registry.create_instances(spec_for(model_dir), cpu_count=2, gpu_count=1)
    assert instance.placement.kind == "KIND_GPU"
    instance.load()
    inputs, outputs = instance.artifact_io()  # type: ignore[misc]
    assert [(t.name, t.datatype, t.shape) for t in inputs] == [("INPUT0", "FP32", (-1, 8))]
    rng = np.random.default_rng(2)
    batch = [rng.standard_normal((n, 8)).astype(np.float32) for n in (1, 3, 4)]
    results = instance.execute_checked(
        [InferRequest(model_name="plan", inputs={"INPUT0": x}) for x in batch]
    )
    import onnxruntime as ort

    reference = ort.InferenceSession(
        str(tmp_path / "onnx" / "mlp" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    for x, result in zip(batch, results, strict=True):
        assert isinstance(result, InferResponse)
        (expected,) = reference.run(None, {"INPUT0": x})
        np.testing.assert_allclose(result.outputs["OUTPUT0"], expected, rtol=1e-3, atol=1e-3)
    instance.unload()


@pytest.mark.gpu
def test_plan_whose_profile_is_smaller_than_max_batch_size_fails_to_load(tmp_path: Path) -> None:
    require_gpu(torch_cuda_missing() or TensorRTInstance.gpu_unusable_reason())
    model_dir = _build_plan(tmp_path, max_batch_size=16)
    (instance,) = registry.create_instances(spec_for(model_dir), cpu_count=2, gpu_count=1)
    with pytest.raises(UnavailableError, match="max_batch_size 16 exceeds the batch dimension"):
        instance.load()
