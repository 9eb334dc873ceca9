"""Auto-complete (PROTOCOL §4.3): platform/backend from files; ONNX I/O, max_batch_size, batching.

ONNX models are read with the ``onnx`` package (graph only, no runtime). Python models complete
themselves in their own process (``serving.backends.python``), so nothing here runs user code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.datatypes import config_datatype_from_onnx
from repository.config.errors import ConfigError
from repository.config.layout import BACKEND_BY_PLATFORM, detect_platform, model_file

DEFAULT_MAX_BATCH_SIZE = 4


@dataclasses.dataclass(frozen=True)
class OnnxTensor:
    """One ONNX graph input or output: config data type and full shape (symbolic dims as -1)."""

    name: str
    data_type: int
    shape: tuple[int, ...] | None  # None: the model does not say


@dataclasses.dataclass
class AutocompleteResult:
    """The completed config, the top-level fields auto-complete filled, and warnings to log."""

    config: mc.ModelConfig
    filled: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def autocomplete_config(
    cfg: mc.ModelConfig,
    *,
    model_name: str,
    version_dir: Path | None,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> tuple[mc.ModelConfig, list[str]]:
    """A completed copy of ``cfg`` and the list of fields that were filled in."""
    result = autocomplete(
        cfg,
        model_name=model_name,
        version_dir=version_dir,
        default_max_batch_size=default_max_batch_size,
    )
    return result.config, result.filled


def autocomplete(
    cfg: mc.ModelConfig,
    *,
    model_name: str,
    version_dir: Path | None,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    read_model: bool = True,
) -> AutocompleteResult:
    """Like ``autocomplete_config``, also returning warnings (e.g. an autofilled batch size).

    ``read_model=False`` only fills name, platform and backend (auto-complete switched off).
    """
    out = mc.ModelConfig()
    out.CopyFrom(cfg)
    result = AutocompleteResult(out)
    if not out.name:
        out.name = model_name
        result.filled.append("name")
    _complete_backend_fields(result, model_name, version_dir)
    if read_model and out.backend == "onnxruntime" and version_dir is not None:
        _complete_onnx(result, version_dir, default_max_batch_size)
    return result


def _complete_backend_fields(
    result: AutocompleteResult, model_name: str, version_dir: Path | None
) -> None:
    cfg = result.config
    if not cfg.platform and not cfg.backend:
        detected = detect_platform(version_dir, model_name)
        if detected is None:
            raise ConfigError(
                [
                    "platform: must specify 'platform' or 'backend' for model "
                    f"'{model_name}' (no known model file was found to detect it)"
                ]
            )
        cfg.platform, cfg.backend = detected
        result.filled += [
            field for field, value in zip(("platform", "backend"), detected, strict=True) if value
        ]
    elif not cfg.backend and cfg.platform in BACKEND_BY_PLATFORM:
        cfg.backend = BACKEND_BY_PLATFORM[cfg.platform]
        if cfg.backend:
            result.filled.append("backend")
    elif not cfg.platform and cfg.backend in ("onnxruntime", "tensorrt", "pytorch"):
        cfg.platform = _platform_for_backend(cfg.backend, version_dir, cfg.default_model_filename)
        result.filled.append("platform")


def _platform_for_backend(backend: str, version_dir: Path | None, filename: str) -> str:
    if backend == "onnxruntime":
        return "onnxruntime_onnx"
    if backend == "tensorrt":
        return "tensorrt_plan"
    # pytorch: TorchScript unless the model file is an AOTInductor package
    if filename:
        return "torch_aoti" if filename.endswith(".pt2") else "pytorch_libtorch"
    if version_dir is not None and _only_aoti_package(version_dir):
        return "torch_aoti"
    return "pytorch_libtorch"


def _only_aoti_package(version_dir: Path) -> bool:
    return (version_dir / "model.pt2").exists() and not (version_dir / "model.pt").exists()


# --------------------------------------------------------------------------- ONNX


def read_onnx_io(path: Path) -> tuple[list[OnnxTensor], list[OnnxTensor]]:
    """The graph inputs (initializers excluded) and outputs of an ONNX model file."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError and others
        raise ConfigError([f"model file: unable to load ONNX model '{path.name}': {err}"]) from None
    initializers = {init.name for init in model.graph.initializer}
    inputs = [_onnx_tensor(v) for v in model.graph.input if v.name not in initializers]
    outputs = [_onnx_tensor(v) for v in model.graph.output]
    return inputs, outputs


def _onnx_tensor(value_info: Any) -> OnnxTensor:
    tensor_type = value_info.type.tensor_type
    data_type = config_datatype_from_onnx(tensor_type.elem_type)
    if data_type is None:
        raise ConfigError(
            [
                f"model file: tensor '{value_info.name}' has ONNX element type "
                f"{tensor_type.elem_type}, which has no Triton data type"
            ]
        )
    if not tensor_type.HasField("shape"):
        return OnnxTensor(value_info.name, data_type, None)
    shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
    return OnnxTensor(value_info.name, data_type, shape)


def _can_batch(tensors: list[OnnxTensor]) -> bool:
    return all(t.shape is not None and len(t.shape) >= 1 and t.shape[0] == -1 for t in tensors)


def _complete_onnx(result: AutocompleteResult, version_dir: Path, default_mbs: int) -> None:
    cfg = result.config
    if len(cfg.input) > 0 and len(cfg.output) > 0:
        return  # the config already lists both: no auto-complete (onnxruntime backend rule)
    path = model_file(version_dir, "onnxruntime", cfg.default_model_filename)
    if not path.is_file():
        raise ConfigError([f"model file: '{path.name}' not found in version folder"])
    inputs, outputs = read_onnx_io(path)
    can_batch = _can_batch(inputs + outputs)
    if cfg.max_batch_size == 0 and can_batch and default_mbs > 0:
        cfg.max_batch_size = default_mbs
        result.filled.append("max_batch_size")
        result.warnings.append(
            f"autofilled max_batch_size to {default_mbs} for model '{cfg.name}' since batching is "
            "supported but no max_batch_size is specified in model configuration. Must specify "
            "max_batch_size to utilize autofill with a larger max batch size"
        )
    elif cfg.max_batch_size != 0 and not can_batch:
        raise ConfigError(
            [
                f"max_batch_size: autofill failed for model '{cfg.name}': the model does not "
                "support batching while non-zero max_batch_size is specified"
            ]
        )
    batching = cfg.max_batch_size > 0
    if _fill_io(cfg.input, inputs, batching):
        result.filled.append("input")
    if _fill_io(cfg.output, outputs, batching):
        result.filled.append("output")
    has_scheduler = cfg.WhichOneof("scheduling_choice") is not None
    if can_batch and cfg.max_batch_size > 1 and not has_scheduler:
        cfg.dynamic_batching.SetInParent()
        result.filled.append("dynamic_batching")


def _fill_io(entries: Any, tensors: list[OnnxTensor], batching: bool) -> bool:
    """Add missing tensors and missing data types/dims of listed ones; True if anything changed."""
    changed = False
    by_name = {entry.name: entry for entry in entries}
    for tensor in tensors:
        entry = by_name.get(tensor.name)
        if entry is None:
            entry = entries.add(name=tensor.name)
            changed = True
        if entry.data_type == mc.TYPE_INVALID:
            entry.data_type = tensor.data_type
            changed = True
        if len(entry.dims) == 0 and not entry.HasField("reshape"):
            _set_dims(entry, tensor.shape, batching)
            changed = True
    return changed


def _set_dims(entry: Any, shape: tuple[int, ...] | None, batching: bool) -> None:
    if shape is None:
        entry.dims.append(-1)
        return
    dims = shape[1:] if batching else shape
    if dims:
        entry.dims.extend(dims)
        return
    entry.dims.append(1)
    if batching:
        entry.reshape.SetInParent()  # the model sees [batch] while requests send [batch, 1]
