"""Turn complete upload sessions into the registry's upload call (archive, one file, or files)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from console.uploads.sessions import (
    UploadSession,
    UploadSessionError,
    upload_session_discard,
    upload_session_get,
)
from repository.models import ModelVersion
from repository.services.versions import model_version_create_from_upload

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
# Auto-complete reads the whole model; past this size the console leaves it to validation.
SUGGEST_MAX_BYTES = 256 * 1024 * 1024
MAX_FILES = 1000


def complete_sessions(*, user_id: int, session_ids: list[Any]) -> list[UploadSession]:
    """The caller's sessions, each fully received, with distinct paths."""
    if not session_ids:
        raise UploadSessionError("add at least one file before creating the version")
    if len(session_ids) > MAX_FILES:
        raise UploadSessionError(f"at most {MAX_FILES} files per version")
    sessions = [upload_session_get(session_id=str(s), user_id=user_id) for s in session_ids]
    for session in sessions:
        if not session.complete:
            raise UploadSessionError(
                f"'{session.path}' is not fully uploaded yet ({session.received} of "
                f"{session.size} bytes)",
                status=409,
                offset=session.received,
            )
    paths = [s.path for s in sessions]
    if len(set(paths)) != len(paths):
        raise UploadSessionError("two files have the same path; remove one")
    return sessions


def _claim(sessions: list[UploadSession]) -> list[UploadSession]:
    """Move the sessions aside so a second submit of the same files cannot make a second version."""
    claimed = []
    for session in sessions:
        target = session.folder.with_name(session.id + ".claimed")
        try:
            session.folder.rename(target)
        except FileNotFoundError as error:
            for done in claimed:
                done.folder.rename(done.folder.with_name(done.id))
            raise UploadSessionError("these files were already submitted", status=409) from error
        claimed.append(
            UploadSession(session.id, session.user_id, session.path, session.size, target)
        )
    return claimed


def create_version(
    *, user: Any, model_name: str, session_ids: list[Any], config_text: str | None
) -> ModelVersion:
    """Register the uploaded files as the model's next version through the registry's service."""
    if not model_name:
        raise UploadSessionError("give the model a name")
    sessions = _claim(complete_sessions(user_id=user.pk, session_ids=session_ids))
    try:
        with contextlib.ExitStack() as stack:
            return _create(stack, user, model_name, sessions, config_text)
    except Exception:
        # Give the files back so the user can fix the name or config and submit again.
        for session in sessions:
            session.folder.rename(session.folder.with_name(session.id))
        raise
    finally:
        for session in sessions:
            if session.folder.exists():
                upload_session_discard(session)


def _create(
    stack: contextlib.ExitStack,
    user: Any,
    model_name: str,
    sessions: list[UploadSession],
    config_text: str | None,
) -> ModelVersion:
    opened = [(s.path, stack.enter_context(s.data_path.open("rb"))) for s in sessions]
    if len(opened) == 1 and opened[0][0].lower().endswith(ARCHIVE_SUFFIXES):
        path, handle = opened[0]
        return model_version_create_from_upload(
            model_name=model_name,
            uploaded_by=user,
            archive=handle,
            archive_name=path.rsplit("/", 1)[-1],
            config_text=config_text,
        )
    if len(opened) == 1 and "/" not in opened[0][0]:
        path, handle = opened[0]
        return model_version_create_from_upload(
            model_name=model_name,
            uploaded_by=user,
            file=handle,
            file_name=path,
            config_text=config_text,
        )
    return model_version_create_from_upload(
        model_name=model_name, uploaded_by=user, files=opened, config_text=config_text
    )


def suggest_config(
    *, user_id: int, model_name: str, session_ids: list[Any]
) -> tuple[str, list[str]]:
    """What auto-complete makes of a single model file (empty when it cannot tell)."""
    sessions = complete_sessions(user_id=user_id, session_ids=session_ids)
    if len(sessions) != 1 or sessions[0].path.lower().endswith(ARCHIVE_SUFFIXES):
        return "", []
    if sessions[0].size > SUGGEST_MAX_BYTES:
        return "", []
    try:
        from repository.config import complete_config
    except ImportError:  # auto-complete not available in this build
        return "", []
    with tempfile.TemporaryDirectory() as tmp:
        version_dir = Path(tmp) / "1"
        version_dir.mkdir()
        target = version_dir / sessions[0].path
        # A hard link avoids copying a large model; fall back to a copy across file systems.
        try:
            target.hardlink_to(sessions[0].data_path)
        except OSError:
            shutil.copyfile(sessions[0].data_path, target)
        try:
            # The devices are the serving replica's to decide, not this suggestion's.
            completed = complete_config(
                None, model_name=model_name or "model", version_dir=version_dir, gpu_count=None
            )
        except Exception:  # noqa: BLE001 - a suggestion; validation reports the real problem
            return "", []
        from repository.config import config_to_text

        return config_to_text(completed.config), list(completed.autocompleted_fields)
