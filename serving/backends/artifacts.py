"""Where a version's model file is: Triton's default names, ``default_model_filename`` overrides."""

from __future__ import annotations

from pathlib import Path

from serving.core.model_spec import ModelSpec
from serving.errors import UnavailableError


def model_file(spec: ModelSpec, default: str) -> Path:
    """The artifact path of a version (``1/model.onnx``), or UNAVAILABLE naming what is missing."""
    filename = spec.config.default_model_filename or default
    path = spec.version_dir / filename
    if not path.exists():
        raise UnavailableError(
            f"failed to load model '{spec.name}' version {spec.version}: "
            f"model file '{filename}' not found in version directory {spec.version}"
        )
    return path
