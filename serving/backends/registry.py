"""Backends by name, loaded lazily, and the instances a model version's config asks for.

``BACKENDS`` is the one table of backends. A backend's module is imported the first time a model
needs it, so starting the server never imports torch or TensorRT for a folder of ONNX models.
``create_instances`` turns the normalised ``instance_group`` into unloaded instances, sizing each
runtime's intra-op thread pool so that the instances of a version do not oversubscribe the cores.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable

from tritonclient.grpc import model_config_pb2

from serving.backends.backend_config import (
    FALSE_WORDS,
    TRUE_WORDS,
    BackendDefaults,
    with_backend_defaults,
)
from serving.backends.base import InstancePlacement, ModelInstance
from serving.core.model_spec import ModelSpec
from serving.errors import UnavailableError, UnsupportedError

logger = logging.getLogger(__name__)

BACKENDS: dict[str, str] = {
    "onnxruntime": "serving.backends.onnxruntime:OnnxRuntimeInstance",
    "pytorch": "serving.backends.pytorch:TorchScriptInstance",
    "python": "serving.backends.python.instance:PythonInstance",
    "tensorrt": "serving.backends.tensorrt:TensorRTInstance",
}

PLATFORM_BACKENDS: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}

# Config ``parameters`` keys that override the thread sizing (case-insensitive; the upper-case
# spellings are the PyTorch backend's, the lower-case ones ONNX Runtime's).
INTRA_OP_THREADS_KEY = "intra_op_thread_count"
INTER_OP_THREADS_KEY = "inter_op_thread_count"

_KIND_NAMES = {
    model_config_pb2.ModelInstanceGroup.KIND_AUTO: "KIND_AUTO",
    model_config_pb2.ModelInstanceGroup.KIND_GPU: "KIND_GPU",
    model_config_pb2.ModelInstanceGroup.KIND_CPU: "KIND_CPU",
    model_config_pb2.ModelInstanceGroup.KIND_MODEL: "KIND_MODEL",
}


def backend_name(config: model_config_pb2.ModelConfig) -> str:
    """The backend table key for a config: ``backend`` if set, else derived from ``platform``."""
    if config.backend:
        return str(config.backend)
    if config.platform in PLATFORM_BACKENDS:
        return PLATFORM_BACKENDS[config.platform]
    raise UnsupportedError(
        f"model '{config.name}': no backend for platform '{config.platform}' "
        f"(supported: {', '.join(sorted(PLATFORM_BACKENDS))}, backend 'python')"
    )


def instance_class(name: str) -> type[ModelInstance]:
    """Import a backend's instance class by its table name (the first use imports the runtime)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UnsupportedError(
            f"backend '{name}' is not supported (available: {', '.join(sorted(BACKENDS))})"
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnavailableError(f"backend '{name}' cannot be imported: {error}") from error
    cls: type[ModelInstance] = getattr(module, class_name)
    return cls


def parameter(config: model_config_pb2.ModelConfig, key: str) -> str | None:
    """A config ``parameters`` string value by key, matched case-insensitively."""
    for name, value in config.parameters.items():
        if name.lower() == key.lower():
            return str(value.string_value)
    return None


def int_parameter(config: model_config_pb2.ModelConfig, key: str) -> int | None:
    value = parameter(config, key)
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise UnavailableError(
            f"model '{config.name}': parameter '{key}' must be an integer, got '{value}'"
        ) from None


def bool_parameter(config: model_config_pb2.ModelConfig, key: str) -> bool | None:
    """A yes/no config parameter; None when absent or blank. Anything else than the usual
    words fails the load instead of quietly meaning "no"."""
    value = parameter(config, key)
    if value is None or not value.strip():
        return None
    word = value.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise UnavailableError(
        f"model '{config.name}': parameter '{key}' must be true or false, got '{value}'"
    )


def plan_placements(
    config: model_config_pb2.ModelConfig, *, cpu_count: int, gpu_count: int
) -> list[InstancePlacement]:
    """Where each instance of a version runs, with its intra-op thread count."""
    slots: list[tuple[str, str, int, int]] = []
    for index, group in enumerate(_groups(config)):
        name = group.name or f"{config.name}_{index}"
        kind = _resolve_kind(group, gpu_count)
        count = group.count if group.count > 0 else 1
        profile = int(group.profile[0]) if group.profile and group.profile[0].isdigit() else 0
        devices: Iterable[int] = [0]
        if kind == "KIND_GPU":
            devices = list(group.gpus) or list(range(max(gpu_count, 1)))
        for device in devices:
            slots.extend((name, kind, device, profile) for _ in range(count))
    threads = intra_op_threads(config, cpu_count=cpu_count, instance_count=len(slots))
    per_group: dict[str, int] = {}
    placements = []
    for name, kind, device, profile in slots:
        ordinal = per_group.get(name, 0)
        per_group[name] = ordinal + 1
        placements.append(
            InstancePlacement(
                name=f"{name}_{ordinal}",
                kind=kind,
                device_id=device,
                intra_op_threads=threads,
                profile=profile,
            )  # fmt: skip
        )
    return placements


def intra_op_threads(
    config: model_config_pb2.ModelConfig, *, cpu_count: int, instance_count: int
) -> int:
    """Threads per instance: the ``intra_op_thread_count`` parameter, else cores / instances."""
    override = int_parameter(config, INTRA_OP_THREADS_KEY)
    if override is not None and override > 0:
        return override
    return max(1, max(cpu_count, 1) // max(instance_count, 1))


def create_instances(
    spec: ModelSpec,
    *,
    cpu_count: int,
    gpu_count: int,
    backend_defaults: BackendDefaults | None = None,
) -> list[ModelInstance]:
    """The (not yet loaded) instances of a version; ensembles have none.

    ``backend_defaults`` (``--backend-config``) fill in the parameters the config leaves unset;
    the instances see them, the served config does not. The caller loads the instances
    (``load_instances``) off the event loop.
    """
    if spec.config.platform == "ensemble":
        return []
    backend = backend_name(spec.config)
    cls = instance_class(backend)
    spec = with_backend_defaults(spec, backend, backend_defaults or {})
    placements = plan_placements(spec.config, cpu_count=cpu_count, gpu_count=gpu_count)
    return [cls(spec, placement) for placement in placements]


def load_instances(instances: list[ModelInstance]) -> None:
    """Load every instance; on the first failure unload those already loaded and re-raise."""
    loaded: list[ModelInstance] = []
    try:
        for instance in instances:
            instance.load()
            loaded.append(instance)
    except BaseException:
        for instance in loaded:
            unload_quietly(instance)
        raise


def unload_quietly(instance: ModelInstance) -> None:
    """Unload, never raising: unloading is on the way out and must release the rest."""
    try:
        instance.unload()
    except Exception:  # noqa: BLE001
        logger.exception("unloading instance %s failed", instance.placement)


def _groups(config: model_config_pb2.ModelConfig) -> list[model_config_pb2.ModelInstanceGroup]:
    if config.instance_group:
        return list(config.instance_group)
    return [model_config_pb2.ModelInstanceGroup(name=config.name, count=1)]


def _resolve_kind(group: model_config_pb2.ModelInstanceGroup, gpu_count: int) -> str:
    kind = _KIND_NAMES.get(group.kind, "KIND_AUTO")
    if kind == "KIND_AUTO":
        return (
            "KIND_GPU" if gpu_count > 0 and all(g < gpu_count for g in group.gpus) else "KIND_CPU"
        )
    if kind == "KIND_MODEL":
        return "KIND_CPU"
    return kind
