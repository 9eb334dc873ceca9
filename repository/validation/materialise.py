"""Write a registry version out as a Triton model folder, verifying every blob's checksum."""

from __future__ import annotations

from pathlib import Path

from repository.blobs import blob_copy_verified
from repository.models import ModelVersion

CONFIG_NAME = "config.pbtxt"


def version_materialise(
    version: ModelVersion, root: Path, *, config_text: str | None = None
) -> tuple[Path, Path]:
    """Write ``root/<model>/<number>/...`` plus model-level files; returns (model_dir, version_dir).

    ``config_text``, when given, is written as the folder's config.pbtxt. Raises BlobIntegrityError
    when a stored blob does not match its sha256.
    """
    model_dir = root / version.model.name
    version_dir = model_dir / str(version.number)
    version_dir.mkdir(parents=True, exist_ok=True)
    for f in version.files.select_related("blob").all():
        base = model_dir if f.model_level else version_dir
        target = (base / f.path).resolve()
        if not target.is_relative_to(base.resolve()):
            raise ValueError(f"{f.path}: escapes the model folder")
        blob_copy_verified(f.blob_id, target)
    if config_text:
        (model_dir / CONFIG_NAME).write_text(config_text, encoding="utf-8")
    return model_dir, version_dir
