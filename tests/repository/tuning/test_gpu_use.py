"""A load test reports the GPU use the server itself reads over the run: the mean utilisation of
its GPUs, and None where it has none (a CPU machine pays for no sampling at all)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from repository.demo_models import write_onnx_mlp
from repository.tuning.gpu_use import GpuSampler, gpu_readings, mean_gpu_percent
from repository.tuning.launcher import private_server
from repository.tuning.loadgen import Shape, Target
from repository.tuning.measure import measure
from tests.gpu_requirement import nvml_gpu_missing, ort_provider_missing, require_gpu

ROW = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}
BODY = json.dumps({"inputs": [ROW]}).encode()


def test_the_mean_covers_every_sample_and_gpu() -> None:
    samples = [[{"utilization": 0.5}, {"utilization": 0.1}], [{"utilization": 0.3}], []]
    assert mean_gpu_percent(samples) == 30.0
    assert mean_gpu_percent([[], []]) is None and mean_gpu_percent([]) is None


def test_a_server_that_cannot_be_read_reports_no_gpu() -> None:
    assert gpu_readings("http://127.0.0.1:1") == []
    with GpuSampler("http://127.0.0.1:1") as sampler:
        pass
    assert sampler.percent is None


@pytest.mark.timeout(180)
def test_a_measured_run_reports_gpu_use_exactly_when_the_server_has_a_gpu(tmp_path: Path) -> None:
    write_onnx_mlp(tmp_path / "models", "mlp", 1, sizes=(16, 32, 4), max_batch_size=8)
    with private_server(tmp_path / "models", startup_timeout_s=120) as server:
        target = Target(url=server.url, path="/v2/models/mlp/versions/1/infer", bodies=[BODY])
        shape = Shape(mode="concurrency", duration_s=1.5, concurrency=2)
        result = measure(server, target, shape, model="mlp", version=1, stop=threading.Event())
    assert result.requests > 0 and result.errors == 0
    if nvml_gpu_missing() is None:
        assert result.gpu_percent is not None and 0.0 <= result.gpu_percent <= 100.0
    else:
        assert result.gpu_percent is None


@pytest.mark.gpu
@pytest.mark.timeout(180)
def test_a_model_on_the_gpu_shows_its_use_in_the_result(tmp_path: Path) -> None:
    require_gpu(nvml_gpu_missing() or ort_provider_missing("CUDAExecutionProvider"))
    models = tmp_path / "models"
    write_onnx_mlp(models, "mlp", 1, sizes=(16, 4096, 4096, 4), max_batch_size=8)
    config = models / "mlp" / "config.pbtxt"
    # The generator writes no instance group: the model goes where it is told, the GPU.
    config.write_text(config.read_text() + "\ninstance_group [{ kind: KIND_GPU count: 1 }]\n")
    with private_server(models, startup_timeout_s=120) as server:
        target = Target(url=server.url, path="/v2/models/mlp/versions/1/infer", bodies=[BODY])
        shape = Shape(mode="concurrency", duration_s=3.0, concurrency=8)
        result = measure(server, target, shape, model="mlp", version=1, stop=threading.Event())
    assert result.requests > 0 and result.errors == 0, result.first_error
    assert result.gpu_percent is not None and result.gpu_percent > 0.0
