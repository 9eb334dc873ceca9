"""Where ``serving.check`` loads a candidate version, given the validating machine's devices.

A validation worker without a usable GPU still checks what it can: a GPU-bound ONNX Runtime or
TorchScript version loads one instance on the CPU runtime (parse, I/O, warm-up and golden requests
run there), and the version is marked "GPU check pending" with the reason; a TensorRT plan cannot
load at all without a GPU. The first GPU replica to load such a version runs the GPU part.
``KIND_AUTO`` alone leaves nothing pending: it means "whatever the replica has".
"""

from __future__ import annotations

import dataclasses

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.accelerators import wants_gpu_accelerator
from serving.core.placement import gpu_unusable_reason, replica_config

KIND = mc.ModelInstanceGroup


@dataclasses.dataclass(frozen=True, slots=True)
class CheckPlacement:
    """The config to load for the check (None: nothing can load here) and what is left pending."""

    config: mc.ModelConfig | None
    pending: str = ""


def check_placement(config: mc.ModelConfig, *, gpu_count: int) -> CheckPlacement:
    """How to check ``config`` on a machine with ``gpu_count`` GPUs."""
    reason = gpu_unusable_reason(config, gpu_count=gpu_count)
    if reason is None or not needs_gpu(config):
        return CheckPlacement(replica_config(config, gpu_count=gpu_count))
    if _is_tensorrt_plan(config):
        return CheckPlacement(None, f"TensorRT plans load only on a GPU ({reason})")
    return CheckPlacement(_on_one_cpu_instance(config), f"this validation worker: {reason}")


def needs_gpu(config: mc.ModelConfig) -> bool:
    """Whether a version only serves as configured on a GPU."""
    kinds = {g.kind for g in config.instance_group}
    return KIND.KIND_GPU in kinds or _is_tensorrt_plan(config) or wants_gpu_accelerator(config)


def _is_tensorrt_plan(config: mc.ModelConfig) -> bool:
    return bool(config.platform == "tensorrt_plan" or config.backend == "tensorrt")


def _on_one_cpu_instance(config: mc.ModelConfig) -> mc.ModelConfig:
    stand_in = mc.ModelConfig()
    stand_in.CopyFrom(config)
    del stand_in.instance_group[:]
    stand_in.instance_group.add(name=f"{config.name}_check", kind=KIND.KIND_CPU, count=1)
    return replica_config(stand_in, gpu_count=0)
