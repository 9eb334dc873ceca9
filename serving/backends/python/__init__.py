"""Python backend: Triton's ``model.py`` contract, one process per instance.

Kept import-light: the model's process imports this package before the user's code.
``autocomplete`` runs a model's ``auto_complete_config`` in a throw-away interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2


def autocomplete(
    cfg: model_config_pb2.ModelConfig, version_dir: Path, *, timeout_s: float = 60.0
) -> model_config_pb2.ModelConfig:
    """``cfg`` completed by the model's ``TritonPythonModel.auto_complete_config`` (if any)."""
    from serving.backends.python.completion import run_autocomplete

    return run_autocomplete(cfg, version_dir, timeout_s=timeout_s)
