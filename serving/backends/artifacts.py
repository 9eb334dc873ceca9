"""Where a version's files are: its model file (Triton's default names, ``default_model_filename``
overrides) and the folder its runtime may cache derived engines in."""

from __future__ import annotations

import functools
import tempfile
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


def engine_cache_dir(spec: ModelSpec) -> Path:
    """A writable folder for the engines a runtime builds from this version (TensorRT)."""
    root = spec.cache_dir or _private_cache_root()
    folder = root / "engines" / spec.name / str(spec.version)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


@functools.cache
def _private_cache_root() -> Path:
    # NOTE: never a shared, guessable folder: an engine planted there would be loaded and run.
    return Path(tempfile.mkdtemp(prefix="portico-engines-"))
