"""Importing a Triton model repository folder into the registry, and exporting the promoted
versions back out in the same layout."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from django.db import transaction

from repository.blobs import blob_copy_verified
from repository.errors import ImportApproverError, RegistryError
from repository.models import ModelVersion, Role, VersionState
from repository.selectors.roles import user_has_role
from repository.services.approvals import SOURCE_IMPORT, model_version_approve
from repository.services.promotion import model_version_promote
from repository.services.validation import model_version_validate
from repository.services.versions import model_name_check, model_version_create_from_staged
from repository.uploads import StagedUpload, stage_directory

logger = logging.getLogger(__name__)

CONFIG_NAME = "config.pbtxt"

# Approves one code-bearing version as it is imported (inside its transaction).
ImportApproval = Callable[[ModelVersion], ModelVersion]


@dataclasses.dataclass
class ImportResult:
    """What an import did, for the command to print."""

    imported: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    promoted: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    awaiting_approval: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    def report(self, *, out: TextIO, err: TextIO) -> None:
        """One line per version: what was imported, failed, skipped, promoted or awaits approval."""
        for name, number, state in self.imported:
            out.write(f"{name} v{number}: {state}")
        for name, number, reason in self.failed:
            err.write(f"{name} v{number}: failed: {reason}")
        for name, reason in self.skipped:
            err.write(f"{name}: skipped: {reason}")
        for name, number in self.promoted:
            out.write(f"{name} v{number}: promoted")
        for name, number in self.awaiting_approval:
            out.write(
                f"{name} v{number}: carries code and awaits an admin's approval "
                "(or import it with --approved-by ADMIN)"
            )


def import_approval(*, approver: Any, uploader: Any = None) -> ImportApproval:
    """The approval of ``import_repository --approved-by``: ``approver`` vouches for the code.

    Checked here, before anything is stored: an active admin, and not the account the code is
    imported as (ImportApproverError). Each version is then approved by ``model_version_approve``,
    which records the approver and the files' hashes in the version and the audit log.
    """
    name = approver.get_username()
    if not user_has_role(approver, Role.ADMIN):
        raise ImportApproverError(name, "only an admin can vouch for imported code")
    if uploader is not None and approver.pk == uploader.pk:
        raise ImportApproverError(
            name, "the code is imported as this account; a second admin must vouch for it"
        )

    def approve(version: ModelVersion) -> ModelVersion:
        return model_version_approve(version=version, actor=approver, source=SOURCE_IMPORT)

    return approve


def repository_import(
    root: Path,
    *,
    sync: bool = False,
    only: list[str] | None = None,
    uploaded_by: Any = None,
    approve: ImportApproval | None = None,
) -> ImportResult:
    """Register every version of every model folder under ``root``, as ``uploaded_by``.

    Code-bearing versions are approved with ``approve`` (see ``import_approval``); without it
    they wait for an admin's approval like any upload, and are not promoted until then. With
    ``sync`` each version is validated here and the highest valid one that needs no (further)
    approval promoted; otherwise the worker validates them and promotes such a version once it
    passes.
    """
    result = ImportResult()
    for model_dir in _model_dirs(root, only):
        versions = _version_dirs(model_dir)
        if not versions:
            result.skipped.append((model_dir.name, "no version folders"))
            continue
        created = [
            _import_version(model_dir, v, sync=sync, result=result, by=uploaded_by, approve=approve)
            for v in versions
        ]
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
    model_dir: Path,
    version_dir: Path,
    *,
    sync: bool,
    result: ImportResult,
    by: Any,
    approve: ImportApproval | None,
) -> ModelVersion | None:
    name, number = model_dir.name, int(version_dir.name)
    try:
        model_name_check(name=name)
        staged = stage_directory(model_dir, version_dir)
        try:
            version = _register(name, number, staged, sync=sync, by=by, approve=approve)
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
    if _awaits_approval(version):
        result.awaiting_approval.append((name, version.number))
    return version


def _register(
    name: str,
    number: int,
    staged: StagedUpload,
    *,
    sync: bool,
    by: Any,
    approve: ImportApproval | None,
) -> ModelVersion:
    with transaction.atomic():
        version = model_version_create_from_staged(
            model_name=name,
            staged=staged,
            uploaded_by=by,
            source="import",
            enqueue=not sync,
            number=number,
        )
        if version.needs_approval and approve is not None:
            version = approve(version)
        # Code nobody vouched for waits for an admin, then a deployer, like an upload.
        version.promote_when_ready = not sync and not _awaits_approval(version)
        version.save(update_fields=["promote_when_ready"])
    return version


def _awaits_approval(version: ModelVersion) -> bool:
    return version.needs_approval and not version.approved


def _promote_highest(name: str, versions: list[ModelVersion], result: ImportResult) -> None:
    ready = [v for v in versions if v.state == VersionState.READY and not _awaits_approval(v)]
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
