"""Importing a Triton model repository folder into the registry, and exporting the promoted
versions back out in the same layout."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from repository.blobs import blob_copy_verified
from repository.errors import RegistryError
from repository.models import Event, ModelVersion, VersionState
from repository.services.events import event_record
from repository.services.promotion import model_version_promote
from repository.services.validation import model_version_validate
from repository.services.versions import model_name_check, model_version_create_from_staged
from repository.uploads import StagedUpload, stage_directory

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.pbtxt"


@dataclasses.dataclass
class ImportResult:
    """What an import did, for the command to print."""

    imported: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    promoted: list[tuple[str, int]] = dataclasses.field(default_factory=list)


def repository_import(
    root: Path, *, sync: bool = False, only: list[str] | None = None
) -> ImportResult:
    """Register every version of every model folder under ``root``.

    The operator running the import is trusted: code-bearing versions are approved as they are
    imported. With ``sync`` each version is validated here and the highest valid one promoted;
    otherwise the worker validates them and promotes the highest once it passes.
    """
    result = ImportResult()
    for model_dir in _model_dirs(root, only):
        versions = _version_dirs(model_dir)
        if not versions:
            result.skipped.append((model_dir.name, "no version folders"))
            continue
        created = [_import_version(model_dir, v, sync=sync, result=result) for v in versions]
        if sync:
            _promote_highest(model_dir.name, [v for v in created if v is not None], result)
    return result


def _model_dirs(root: Path, only: list[str] | None) -> list[Path]:
    dirs = [p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    if only:
        dirs = [p for p in dirs if p.name in only]
    # Ensembles last: validating one may need the models it is made of.
    return sorted(dirs, key=lambda p: (_is_ensemble(p), p.name))


def _is_ensemble(model_dir: Path) -> bool:
    config = model_dir / CONFIG_NAME
    return config.is_file() and "ensemble" in config.read_text(errors="replace")


def _version_dirs(model_dir: Path) -> list[Path]:
    return sorted(
        (
            p
            for p in model_dir.iterdir()
            if p.is_dir() and p.name.isdigit() and (p.name == "0" or not p.name.startswith("0"))
        ),
        key=lambda p: int(p.name),
    )


def _import_version(
    model_dir: Path, version_dir: Path, *, sync: bool, result: ImportResult
) -> ModelVersion | None:
    name, number = model_dir.name, int(version_dir.name)
    try:
        model_name_check(name=name)
        staged = stage_directory(model_dir, version_dir)
        try:
            version = _register(name, number, staged, sync=sync)
        finally:
            staged.cleanup()
    except RegistryError as exc:
        result.failed.append((name, number, exc.message))
        return None
    if sync:
        model_version_validate(version_id=version.pk)
        version.refresh_from_db()
        if version.state == VersionState.FAILED:
            result.failed.append((name, version.number, version.validation_error))
            return None
    result.imported.append((name, version.number, version.state))
    return version


def _register(name: str, number: int, staged: StagedUpload, *, sync: bool) -> ModelVersion:
    with transaction.atomic():
        version = model_version_create_from_staged(
            model_name=name,
            staged=staged,
            uploaded_by=None,
            source="import",
            enqueue=not sync,
            number=number,
        )
        fields = ["promote_when_ready"]
        version.promote_when_ready = not sync
        if version.needs_approval:
            version.approved_at = timezone.now()
            fields.append("approved_at")
            event_record(
                actor=None,
                action=Event.Action.APPROVE,
                model=version.model,
                to_version=version.number,
                detail={"source": "import"},
            )
        version.save(update_fields=fields)
    return version


def _promote_highest(name: str, versions: list[ModelVersion], result: ImportResult) -> None:
    ready = [v for v in versions if v.state == VersionState.READY]
    if not ready:
        return
    best = max(ready, key=lambda v: v.number)
    try:
        model_version_promote(version=best, actor=None)
    except RegistryError as exc:
        result.failed.append((name, best.number, exc.message))
        return
    result.promoted.append((name, best.number))


def repository_export(root: Path) -> list[tuple[str, int]]:
    """Write each model's promoted version as ``root/<model>/config.pbtxt`` + ``<n>/...``."""
    root.mkdir(parents=True, exist_ok=True)
    exported = []
    promoted = (
        ModelVersion.objects.filter(state=VersionState.PROMOTED)
        .select_related("model")
        .prefetch_related("files__blob")
        .order_by("model__name")
    )
    for version in promoted:
        model_dir = root / version.model.name
        version_dir = model_dir / str(version.number)
        version_dir.mkdir(parents=True)
        for f in version.files.all():
            blob_copy_verified(f.blob_id, (model_dir if f.model_level else version_dir) / f.path)
        (model_dir / CONFIG_NAME).write_text(version.config_text, encoding="utf-8")
        exported.append((version.model.name, version.number))
    return exported
