"""Creating versions: from an upload, from a staged folder (import), or as a config change."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, BinaryIO

from django.db import IntegrityError, transaction
from django.db.models import Max

from repository.blobs import blob_store_file
from repository.errors import InvalidModelNameError, UploadError
from repository.models import Event, Model, ModelVersion, VersionFile, VersionState
from repository.services.events import event_record
from repository.services.validation import enqueue_validation_on_commit
from repository.uploads import (
    StagedUpload,
    stage_archive,
    stage_files,
    stage_single_file,
)

logger = logging.getLogger(__name__)

MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
PYTHON_FILE_SUFFIXES = (".py",)
MODEL_CREATE_ATTEMPTS = 3


def model_name_check(*, name: str) -> None:
    if not MODEL_NAME_RE.match(name or "") or name in (".", ".."):
        raise InvalidModelNameError(name)


def model_version_create_from_upload(
    *,
    model_name: str,
    uploaded_by: Any,
    archive: BinaryIO | None = None,
    archive_name: str = "",
    file: BinaryIO | None = None,
    file_name: str = "",
    config_text: str | None = None,
    files: Sequence[tuple[str, BinaryIO]] | None = None,
    description: str = "",
) -> ModelVersion:
    """Accept an upload (exactly one of ``archive``, ``file`` or ``files``) as a new version.

    The version is created in ``uploaded`` and validation is enqueued once the transaction commits.
    Raises UploadError (and subclasses) for bad uploads, InvalidModelNameError for bad names;
    either way nothing is left behind.
    """
    model_name_check(name=model_name)
    given = [x is not None for x in (archive, file, files)]
    if sum(given) != 1:
        raise UploadError(
            "send exactly one of 'archive', 'file' or separate files", reason="missing_upload"
        )
    if archive is not None:
        staged = stage_archive(archive, filename=archive_name)
        if config_text:
            staged.config_text = config_text
    elif file is not None:
        staged = stage_single_file(file, filename=file_name, config_text=config_text)
    else:
        assert files is not None
        staged = stage_files(files)
        if config_text:
            staged.config_text = config_text
    try:
        return model_version_create_from_staged(
            model_name=model_name,
            staged=staged,
            uploaded_by=uploaded_by,
            description=description,
            source="upload",
        )
    finally:
        staged.cleanup()


def model_version_create_from_staged(
    *,
    model_name: str,
    staged: StagedUpload,
    uploaded_by: Any,
    description: str = "",
    source: str = "upload",
    enqueue: bool = True,
    number: int | None = None,
) -> ModelVersion:
    """Store a staged folder's files as blobs and register them as the model's next version.

    ``number`` keeps a version number (import); when it is taken, the next free number is used.
    """
    model_name_check(name=model_name)
    # Blobs are content-addressed and immutable, so storing them before the transaction is safe:
    # a failed transaction leaves only unreferenced (and reusable) content behind.
    stored = [(f.path, blob_store_file(f.source), False) for f in staged.version_files]
    stored += [(f.path, blob_store_file(f.source), True) for f in staged.model_files]
    with transaction.atomic():
        model = _model_lock_or_create(model_name, owner=uploaded_by, description=description)
        version = ModelVersion.objects.create(
            model=model,
            number=_free_number(model, number),
            state=VersionState.UPLOADED,
            submitted_config_text=staged.config_text or "",
            uploaded_by=uploaded_by if uploaded_by is not None and uploaded_by.pk else None,
            needs_approval=any(p.endswith(PYTHON_FILE_SUFFIXES) for p, _, _ in stored),
            size=sum(b.size for _, b, _ in stored),
        )
        VersionFile.objects.bulk_create(
            VersionFile(version=version, path=p, blob=b, model_level=m) for p, b, m in stored
        )
        if version.uploaded_by is not None:
            version.code_uploaders.add(version.uploaded_by)
        event_record(
            actor=uploaded_by,
            action=Event.Action.IMPORT if source == "import" else Event.Action.UPLOAD,
            model=model,
            to_version=version.number,
            detail={"source": source, "files": len(stored), "size": version.size},
        )
        if enqueue:
            enqueue_validation_on_commit(version.pk)
    return version


def model_version_create_with_config(
    *, version: ModelVersion, config_text: str, uploaded_by: Any
) -> ModelVersion:
    """A config change: a new version with ``config_text`` that reuses ``version``'s blobs.

    Its uploader is the config's author; the code's uploaders carry over from ``version``, so
    none of them can approve the copy of code they uploaded (nor can the config's author).
    """
    with transaction.atomic():
        model = Model.objects.select_for_update().get(pk=version.model_id)
        new = ModelVersion.objects.create(
            model=model,
            number=_next_number(model),
            state=VersionState.UPLOADED,
            submitted_config_text=config_text,
            uploaded_by=uploaded_by if uploaded_by is not None and uploaded_by.pk else None,
            needs_approval=version.needs_approval,
            size=version.size,
        )
        VersionFile.objects.bulk_create(
            VersionFile(version=new, path=f.path, blob_id=f.blob_id, model_level=f.model_level)
            for f in version.files.all()
        )
        new.code_uploaders.set(version.code_uploaders.all())
        event_record(
            actor=uploaded_by,
            action=Event.Action.UPLOAD,
            model=model,
            from_version=version.number,
            to_version=new.number,
            detail={"source": "config_change"},
        )
        enqueue_validation_on_commit(new.pk)
    return new


def _model_lock_or_create(name: str, *, owner: Any, description: str) -> Model:
    """The model row named ``name``, locked for this transaction; created when it is new.

    NOTE: two first uploads of one name race here. The unique name makes the second INSERT wait
    for the first transaction and then fail; the savepoint keeps our transaction usable and the
    next attempt reads (and locks) the row the first one committed. The lock serialises version
    numbering and promotions for the model.
    """
    for attempt in range(1, MODEL_CREATE_ATTEMPTS + 1):
        model = Model.objects.select_for_update().filter(name=name).first()
        if model is not None:
            return model
        try:
            with transaction.atomic():
                return Model.objects.create(
                    name=name,
                    owner=owner if owner is not None and owner.pk else None,
                    description=description,
                )
        except IntegrityError:
            # The other upload's transaction may also roll back (then the name is free again).
            if attempt == MODEL_CREATE_ATTEMPTS:
                raise
            logger.info("model %s was created concurrently; reading it (attempt %d)", name, attempt)
    raise AssertionError("unreachable")


def _next_number(model: Model) -> int:
    highest = model.versions.aggregate(n=Max("number"))["n"]
    return int(highest or 0) + 1


def _free_number(model: Model, wanted: int | None) -> int:
    if wanted and wanted >= 1 and not model.versions.filter(number=wanted).exists():
        return wanted
    return _next_number(model)
