"""Where a version's instances run, decided by the replica that loads it.

The registry stores a version's config as the user wrote it (``KIND_AUTO``, ``KIND_GPU``,
``gpus: [...]``); each replica resolves it here against its own devices: the GPUs NVML shows
(``serving.core.devices``) and whether the backend's runtime was built with CUDA. A ``KIND_GPU``
group that cannot have a GPU makes the version UNAVAILABLE with the reason; it never runs on the
CPU instead. ``KIND_AUTO`` takes a GPU only when both the device and the runtime are there.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from repository.config import ConfigError, normalize_config
from serving.errors import UnavailableError

NO_GPU_REASON = "no NVIDIA GPU is visible to this replica (NVML lists none)"


def replica_config(config: mc.ModelConfig, *, gpu_count: int) -> mc.ModelConfig:
    """``config`` normalised for this replica's ``gpu_count`` GPUs and the backend's runtime.

    Raises ``UnavailableError`` naming the group when a ``KIND_GPU`` group cannot be placed.
    """
    if config.platform == "ensemble":
        return normalize_config(config, gpu_count=gpu_count)
    reason = gpu_unusable_reason(config, gpu_count=gpu_count)
    gpu_groups = [g for g in config.instance_group if g.kind == mc.ModelInstanceGroup.KIND_GPU]
    if reason is not None and gpu_groups:
        names = ", ".join(f"'{g.name}'" for g in gpu_groups)
        raise UnavailableError(
            f"model '{config.name}': instance group {names} has kind KIND_GPU but this replica "
            f"has no usable GPU: {reason}; it is not served on the CPU instead"
        )
    try:
        return normalize_config(config, gpu_count=0 if reason else gpu_count)
    except ConfigError as error:
        raise UnavailableError(f"model '{config.name}': " + "; ".join(error.problems)) from None


def gpu_unusable_reason(config: mc.ModelConfig, *, gpu_count: int) -> str | None:
    """Why this replica cannot run ``config`` on a GPU; None when it can."""
    if gpu_count <= 0:
        return NO_GPU_REASON
    if not _may_use_gpu(config):
        return None  # a CPU-only config never imports a runtime just to ask
    from serving.backends.registry import backend_name, instance_class

    return instance_class(backend_name(config)).gpu_unusable_reason()


def _may_use_gpu(config: mc.ModelConfig) -> bool:
    kinds = {g.kind for g in config.instance_group} or {mc.ModelInstanceGroup.KIND_AUTO}
    return bool(kinds & {mc.ModelInstanceGroup.KIND_AUTO, mc.ModelInstanceGroup.KIND_GPU})
