"""What a loaded model version is made of, handed from a source to the server core."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc import model_config_pb2


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSpec:
    """One version of one model, ready to be loaded.

    ``version_dir`` holds the version's files (``1/model.onnx``); ``model_dir`` is the model's
    folder (label files, ``warmup/``). ``config`` is complete: validated, auto-completed and
    normalised. ``cache_dir`` is a writable folder of the replica's own for what a runtime
    derives from the version (TensorRT engines); None: a private temporary folder.
    """

    name: str
    version: int
    config: model_config_pb2.ModelConfig
    model_dir: Path
    version_dir: Path
    cache_dir: Path | None = None
