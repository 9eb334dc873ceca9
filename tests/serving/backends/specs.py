"""Build a ``ModelSpec`` from a generated model folder, as a source would hand it to the core."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from serving.core.model_spec import ModelSpec


def spec_for(model_dir: Path, version: int = 1, *, edit: str = "") -> ModelSpec:
    """The spec of ``model_dir/<version>``; ``edit``: config text merged over config.pbtxt."""
    config = text_format.Parse(
        (model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    if edit:
        text_format.Merge(edit, config)
    if not config.name:
        config.name = model_dir.name
    return ModelSpec(
        name=model_dir.name,
        version=version,
        config=config,
        model_dir=model_dir,
        version_dir=model_dir / str(version),
    )
