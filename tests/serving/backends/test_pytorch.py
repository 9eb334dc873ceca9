"""The PyTorch backend on a generated TorchScript model (Triton's INPUT__0 naming)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from repository import demo_models
from serving.backends.base import InstancePlacement
from serving.backends.pytorch import TorchScriptInstance
from serving.core.types import InferRequest, InferResponse, RequestedOutput
from serving.errors import ServingError, UnavailableError
from tests.gpu_requirement import require_gpu, torch_cuda_missing

from .specs import spec_for

pytestmark = pytest.mark.embedded

CPU = InstancePlacement(name="t_0", kind="KIND_CPU", intra_op_threads=1)


@pytest.fixture(scope="module")
def add_sub_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_models.write_torchscript_add_sub(tmp_path_factory.mktemp("torch"), dtype="FP32")


def _request(batch: int, value: float, **kwargs: object) -> InferRequest:
    a = np.full((batch, 16), value, dtype=np.float32)
    b = np.ones((batch, 16), dtype=np.float32)
    return InferRequest(model_name="simple_torch", inputs={"INPUT__0": a, "INPUT__1": b}, **kwargs)  # type: ignore[arg-type]


def test_inputs_by_index_outputs_in_order_and_batches_split(add_sub_dir: Path) -> None:
    instance = TorchScriptInstance(spec_for(add_sub_dir), CPU)
    assert not instance.can_run_inline()  # nothing is known before the module is loaded
    instance.load()
    assert instance.can_run_inline()
    results = instance.execute_checked([_request(1, 5.0), _request(2, 7.0)])
    first, second = results
    assert isinstance(first, InferResponse) and isinstance(second, InferResponse)
    assert first.outputs["OUTPUT__0"].shape == (1, 16) and first.outputs["OUTPUT__0"][0, 0] == 6.0
    assert second.outputs["OUTPUT__1"].shape == (2, 16) and second.outputs["OUTPUT__1"][1, 0] == 6.0
    instance.unload()


def test_input_order_follows_the_index_suffix_not_the_config_order(add_sub_dir: Path) -> None:
    spec = spec_for(add_sub_dir)
    inputs = list(spec.config.input)
    del spec.config.input[:]
    spec.config.input.extend(reversed(inputs))  # INPUT__1 first in the config
    instance = TorchScriptInstance(spec, CPU)
    instance.load()
    request = _request(1, 5.0, outputs=[RequestedOutput(name="OUTPUT__1")])
    (result,) = instance.execute_checked([request])
    assert isinstance(result, InferResponse) and list(result.outputs) == ["OUTPUT__1"]
    assert result.outputs["OUTPUT__1"][0, 0] == 4.0  # INPUT__0 - INPUT__1


def test_bad_request_fails_alone(add_sub_dir: Path) -> None:
    instance = TorchScriptInstance(spec_for(add_sub_dir), CPU)
    instance.load()
    bad = _request(1, 1.0)
    bad.inputs["INPUT__1"] = np.ones((1, 3), np.float32)
    good, failed = instance.execute_checked([_request(1, 1.0), bad])
    assert isinstance(good, InferResponse) and isinstance(failed, ServingError)


def test_corrupt_model_fails_to_load(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path, "broken_torch", dtype="FP32")
    (model_dir / "1" / "model.pt").write_bytes(b"not a torchscript archive")
    with pytest.raises(UnavailableError, match="torch.jit.load failed"):
        TorchScriptInstance(spec_for(model_dir), CPU).load()


@pytest.mark.gpu
def test_gpu_placement_runs_on_cuda(add_sub_dir: Path) -> None:
    require_gpu(torch_cuda_missing())
    gpu = InstancePlacement(name="t_0", kind="KIND_GPU", device_id=0)
    instance = TorchScriptInstance(spec_for(add_sub_dir), gpu)
    instance.load()
    assert not instance.can_run_inline()
    (result,) = instance.execute_checked([_request(2, 3.0)])
    assert isinstance(result, InferResponse) and result.outputs["OUTPUT__0"][0, 0] == 4.0


def test_gpu_placement_without_cuda_is_unavailable_never_run_on_the_cpu(add_sub_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here; this checks a runtime without it")
    gpu = InstancePlacement(name="t_0", kind="KIND_GPU", device_id=0)
    with pytest.raises(UnavailableError) as info:
        TorchScriptInstance(spec_for(add_sub_dir), gpu).load()
    assert "instance 't_0' is placed on GPU 0 but torch" in info.value.message
    assert "torch.cuda.is_available() is False" in info.value.message
