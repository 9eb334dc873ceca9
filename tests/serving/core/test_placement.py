"""A replica places a version on its own devices: the inventory is a value, runtimes are real."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from repository.config import parse_config_text
from serving.backends.registry import plan_placements
from serving.core.devices import GpuDevice, visible_devices
from serving.core.placement import NO_GPU_REASON, gpu_unusable_reason, replica_config
from serving.errors import UnavailableError

pytestmark = pytest.mark.embedded

ONNX = 'name: "m" platform: "onnxruntime_onnx" backend: "onnxruntime" max_batch_size: 8 '
PYTHON = 'name: "p" backend: "python" max_batch_size: 8 '
CPU_ORT = pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="checks a CPU build of onnxruntime; this one has the CUDA provider",
)


def _groups(config: mc.ModelConfig) -> list[tuple[str, int, list[int]]]:
    kind = mc.ModelInstanceGroup.Kind
    return [(kind.Name(g.kind), g.count, list(g.gpus)) for g in config.instance_group]


def test_kind_gpu_without_any_gpu_is_unavailable_with_the_reason() -> None:
    config = parse_config_text(ONNX + 'instance_group { name: "g" kind: KIND_GPU }')
    with pytest.raises(UnavailableError) as info:
        replica_config(config, gpu_count=0)
    assert info.value.message == (
        f"model 'm': instance group 'g' has kind KIND_GPU but this replica has no usable GPU: "
        f"{NO_GPU_REASON}; it is not served on the CPU instead"
    )


@CPU_ORT
def test_kind_gpu_with_a_gpu_but_a_cpu_build_of_onnxruntime_is_unavailable() -> None:
    config = parse_config_text(ONNX + 'instance_group { name: "g" kind: KIND_GPU }')
    with pytest.raises(UnavailableError, match="has no CUDAExecutionProvider") as info:
        replica_config(config, gpu_count=2)
    assert "instance group 'g' has kind KIND_GPU" in info.value.message


@CPU_ORT
def test_kind_auto_stays_on_the_cpu_when_the_runtime_has_no_cuda() -> None:
    config = parse_config_text(ONNX + "instance_group { }")
    assert _groups(replica_config(config, gpu_count=2)) == [("KIND_CPU", 2, [])]


def test_kind_auto_takes_every_gpu_when_device_and_runtime_allow() -> None:
    # The Python backend leaves the device to the model, so only the inventory decides.
    config = parse_config_text(PYTHON + "instance_group { }")
    assert gpu_unusable_reason(config, gpu_count=2) is None
    assert _groups(replica_config(config, gpu_count=2)) == [("KIND_GPU", 1, [0, 1])]
    assert _groups(replica_config(config, gpu_count=0)) == [("KIND_CPU", 1, [])]


def test_a_cpu_only_config_never_asks_a_runtime_about_cuda() -> None:
    config = parse_config_text(ONNX + "instance_group { kind: KIND_CPU }")
    assert gpu_unusable_reason(config, gpu_count=4) is None


def test_two_instances_on_each_listed_gpu_are_placed_on_those_gpus() -> None:
    text = PYTHON + 'instance_group { name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }'
    config = replica_config(parse_config_text(text), gpu_count=2)
    placements = plan_placements(config, cpu_count=8, gpu_count=2)
    assert [(p.name, p.kind, p.device_id) for p in placements] == [
        ("g_0", "KIND_GPU", 0),
        ("g_1", "KIND_GPU", 0),
        ("g_2", "KIND_GPU", 1),
        ("g_3", "KIND_GPU", 1),
    ]


def test_a_group_on_one_listed_gpu_uses_only_that_gpu() -> None:
    text = PYTHON + 'instance_group { name: "g" kind: KIND_GPU gpus: [ 1 ] }'
    config = replica_config(parse_config_text(text), gpu_count=2)
    assert [p.device_id for p in plan_placements(config, cpu_count=2, gpu_count=2)] == [1]


def test_a_listed_gpu_the_replica_lacks_is_unavailable_naming_it() -> None:
    text = PYTHON + 'instance_group { name: "g" kind: KIND_GPU gpus: [ 0, 3 ] }'
    with pytest.raises(UnavailableError, match=r"instance_group\[0\].gpus: .* gpu id 3"):
        replica_config(parse_config_text(text), gpu_count=2)


def _gpus(count: int) -> tuple[GpuDevice, ...]:
    return tuple(GpuDevice(i, f"GPU-{i}aaa", "H200", 141 << 30) for i in range(count))


def test_cuda_visible_devices_narrows_and_renumbers_what_nvml_lists() -> None:
    assert visible_devices(_gpus(4), None) == _gpus(4)
    chosen = visible_devices(_gpus(4), "2,GPU-0aaa")
    assert [(d.index, d.uuid) for d in chosen] == [(0, "GPU-2aaa"), (1, "GPU-0aaa")]


def test_cuda_visible_devices_stops_at_the_first_unknown_entry_like_cuda() -> None:
    assert visible_devices(_gpus(2), "-1") == ()
    assert [d.uuid for d in visible_devices(_gpus(2), "1,7,0")] == ["GPU-1aaa"]
    assert visible_devices(_gpus(2), "") == ()
