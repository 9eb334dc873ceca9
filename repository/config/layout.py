"""The Triton model folder: version folders, ``config.pbtxt``, model files, platform detection."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from repository.config.errors import ConfigError

CONFIG_FILENAME = "config.pbtxt"
NEVER_VERSIONS = frozenset({"warmup", "initial_state", "configs"})

# Searched in this order when neither platform nor backend is set: (file, platform, backend).
DETECTION_ORDER: tuple[tuple[str, str, str], ...] = (
    ("model.plan", "tensorrt_plan", "tensorrt"),
    ("model.onnx", "onnxruntime_onnx", "onnxruntime"),
    ("model.pt", "pytorch_libtorch", "pytorch"),
    ("model.pt2", "torch_aoti", "pytorch"),
    ("model.py", "", "python"),
    ("model.savedmodel", "tensorflow_savedmodel", "tensorflow"),
    ("model.graphdef", "tensorflow_graphdef", "tensorflow"),
    ("model.xml", "", "openvino"),
)

# platform -> the backend it implies
BACKEND_BY_PLATFORM: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "torch_aoti": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
    "ensemble": "",
}

# backend -> its default model file name
DEFAULT_MODEL_FILENAME: dict[str, str] = {
    "onnxruntime": "model.onnx",
    "tensorrt": "model.plan",
    "pytorch": "model.pt",
    "python": "model.py",
    "openvino": "model.xml",
}

_MODEL_NAME = re.compile(r"^[^/\\\x00]+$")


@dataclasses.dataclass(frozen=True)
class ModelFolder:
    """What a model folder holds: config text (None when absent), versions, what was skipped."""

    name: str
    path: Path
    config_text: str | None
    versions: dict[int, Path]
    warnings: tuple[str, ...] = ()


def check_model_name(name: str) -> None:
    """Model names are folder names: no separators, no ``.``/``..``, no NUL."""
    if not name or name in (".", "..") or not _MODEL_NAME.match(name):
        raise ConfigError([f"name: invalid model name '{name}'"])


def version_number(dirname: str) -> int | None:
    """The version a folder name stands for; None for non-integers and leading zeros (``01``)."""
    if dirname in NEVER_VERSIONS or not dirname.isdigit() or not dirname.isascii():
        return None
    if len(dirname) > 1 and dirname.startswith("0"):
        return None
    return int(dirname)


def scan_model_folder(model_dir: Path, *, config_name: str | None = None) -> ModelFolder:
    """Read a model folder. ``config_name`` picks ``configs/<name>.pbtxt`` when that file exists."""
    model_dir = Path(model_dir)
    check_model_name(model_dir.name)
    config_path = model_dir / CONFIG_FILENAME
    if config_name:
        alternative = model_dir / "configs" / f"{config_name}.pbtxt"
        config_path = alternative if alternative.is_file() else config_path
    config_text = config_path.read_text() if config_path.is_file() else None
    versions: dict[int, Path] = {}
    warnings: list[str] = []
    for child in sorted(model_dir.iterdir()):
        if not child.is_dir() or child.name in NEVER_VERSIONS:
            continue
        number = version_number(child.name)
        if number is None:
            warnings.append(f"ignoring '{child.name}': not a valid version directory name")
        else:
            versions[number] = child
    return ModelFolder(model_dir.name, model_dir, config_text, versions, tuple(warnings))


def detect_platform(version_dir: Path | None, model_name: str) -> tuple[str, str] | None:
    """(platform, backend) from the files in a version folder, else from a ``x.<backend>`` name."""
    if version_dir is not None and version_dir.is_dir():
        for filename, platform, backend in DETECTION_ORDER:
            if (version_dir / filename).exists():
                return platform, backend
    if "." in model_name.strip("."):
        return "", model_name.rsplit(".", 1)[1]
    return None


def model_file(version_dir: Path, backend: str, default_model_filename: str = "") -> Path:
    """The artifact path for a backend (``model.onnx`` may be a folder holding ``model.onnx``)."""
    filename = default_model_filename or DEFAULT_MODEL_FILENAME.get(backend, "model")
    path = version_dir / filename
    if backend == "onnxruntime" and path.is_dir():
        return path / "model.onnx"
    return path
