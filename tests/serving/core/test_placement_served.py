"""On a real CPU replica, a KIND_GPU version is UNAVAILABLE with its reason in the repository index,
next to a KIND_AUTO version that serves on the CPU; never a silent CPU fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient

from repository import demo_models
from tests.gpu_requirement import nvml_gpu_missing, ort_provider_missing, require_gpu
from tests.serving.harness import serving

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


def _repository(repo: Path) -> None:
    gpu = demo_models.write_onnx_identity(repo, "on_gpu", dims=(-1,), max_batch_size=8)
    config = gpu / "config.pbtxt"
    config.write_text(config.read_text() + '\ninstance_group { name: "g" kind: KIND_GPU }\n')
    auto = demo_models.write_onnx_identity(repo, "anywhere", dims=(-1,), max_batch_size=8)
    config = auto / "config.pbtxt"
    config.write_text(config.read_text() + "\ninstance_group { }\n")


def _index(url: str) -> dict[str, dict[str, str]]:
    client = httpclient.InferenceServerClient(url)
    return {row["name"]: row for row in client.get_model_repository_index()}


def _served_on_the_cpu(url: str) -> None:
    client = httpclient.InferenceServerClient(url)
    data = np.arange(3, dtype=np.float32).reshape(1, 3)
    tensor = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("anywhere", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_kind_gpu_on_a_replica_without_gpus_is_unavailable_with_the_reason(
    tmp_path: Path,
) -> None:
    _repository(tmp_path)
    with serving(tmp_path, exit_on_error=False) as server:  # its own devices, through NVML
        from serving.core.devices import detected_gpus

        if detected_gpus():
            pytest.skip("this machine has an NVIDIA GPU; this checks a replica without one")
        index = _index(server.http_url)
        assert index["on_gpu"]["state"] == "UNAVAILABLE"
        assert index["on_gpu"]["reason"] == (
            "model 'on_gpu': instance group 'g' has kind KIND_GPU but this replica has no usable "
            "GPU: no NVIDIA GPU is visible to this replica (NVML lists none); it is not served "
            "on the CPU instead"
        )
        assert index["anywhere"]["state"] == "READY"
        _served_on_the_cpu(server.http_url)


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="checks a CPU build of onnxruntime; this one has the CUDA provider",
)
def test_kind_gpu_with_a_gpu_but_a_runtime_without_cuda_is_unavailable_with_the_reason(
    tmp_path: Path,
) -> None:
    _repository(tmp_path)
    # The inventory as a value: one GPU, as SERVING_GPU_COUNT=1 declares; the runtime is real.
    with serving(tmp_path, gpu_count=1, exit_on_error=False) as server:
        index = _index(server.http_url)
        assert index["on_gpu"]["state"] == "UNAVAILABLE"
        reason = index["on_gpu"]["reason"]
        assert "instance group 'g' has kind KIND_GPU but this replica has no usable GPU" in reason
        assert f"onnxruntime {ort.__version__} has no CUDAExecutionProvider" in reason
        assert index["anywhere"]["state"] == "READY"  # KIND_AUTO: the CPU, as the runtime allows
        _served_on_the_cpu(server.http_url)


@pytest.mark.gpu
def test_two_instances_of_a_gpu_group_serve_on_the_listed_gpus(tmp_path: Path) -> None:
    require_gpu(nvml_gpu_missing() or ort_provider_missing("CUDAExecutionProvider"))
    from serving.core.devices import detected_gpus

    gpus = list(range(min(len(detected_gpus()), 2)))
    model = demo_models.write_onnx_identity(tmp_path, "anywhere", dims=(-1,), max_batch_size=8)
    config = model / "config.pbtxt"
    config.write_text(
        config.read_text()
        + f'\ninstance_group {{ name: "g" kind: KIND_GPU count: 2 gpus: {gpus} }}\n'
    )
    with serving(tmp_path, exit_on_error=False) as server:
        assert _index(server.http_url)["anywhere"]["state"] == "READY"
        client = httpclient.InferenceServerClient(server.http_url)
        (group,) = client.get_model_config("anywhere")["instance_group"]
        assert (group["kind"], group["count"], group["gpus"]) == ("KIND_GPU", 2, gpus)
        instances = server.server.models["anywhere"].versions[1].instances
        assert [(i.placement.kind, i.placement.device_id) for i in instances] == [
            ("KIND_GPU", gpu) for gpu in gpus for _ in range(2)
        ]
        assert all(i.providers[0] == "CUDAExecutionProvider" for i in instances)  # type: ignore[attr-defined]
        _served_on_the_cpu(server.http_url)  # same answer, now computed on the GPU


@pytest.mark.gpu
def test_kind_gpu_on_a_gpu_machine_with_no_visible_gpu_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_gpu(nvml_gpu_missing())
    from bench.server import serving as serving_process

    _repository(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # the replica's own process sees no GPU
    with serving_process(tmp_path, extra_args=("--exit-on-error=false",)) as addresses:
        index = _index(addresses["http"])
    assert index["on_gpu"]["state"] == "UNAVAILABLE"
    assert "no NVIDIA GPU is visible to this replica" in index["on_gpu"]["reason"]
    assert index["anywhere"]["state"] == "READY"
