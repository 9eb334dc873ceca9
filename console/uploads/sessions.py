"""Upload sessions on disk: ``<UPLOAD_DIR>/sessions/<id>/{meta.json,data}``.

The received offset is the data file's length, so it survives a console restart and needs no
table. A chunk is only accepted at exactly the received offset; anything else is answered with the
offset the client must resume from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from django.conf import settings

SESSION_ID_RE = re.compile(r"^[0-9a-f]{32}$")
# Sessions nobody finished are removed after this long (checked when a new session opens).
STALE_SESSION_S = 24 * 3600


class UploadSessionError(Exception):
    """A bad request against an upload session (``status`` is the HTTP status the view answers)."""

    def __init__(self, message: str, *, status: int = 400, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.offset = offset


@dataclasses.dataclass
class UploadSession:
    """One file being uploaded: who owns it, its relative path, declared size, bytes received."""

    id: str
    user_id: int
    path: str
    size: int
    folder: Path

    @property
    def data_path(self) -> Path:
        return self.folder / "data"

    @property
    def received(self) -> int:
        return self.data_path.stat().st_size

    @property
    def complete(self) -> bool:
        return self.received == self.size

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "path": self.path,
            "size": self.size,
            "offset": self.received,
            "complete": self.complete,
        }


def sessions_root() -> Path:
    root = Path(settings.UPLOAD_DIR) / "sessions"
    root.mkdir(parents=True, exist_ok=True)
    return root


def clean_relative_path(raw: str) -> str:
    """A file's path inside the upload (``1/model.onnx``), refusing anything that escapes it."""
    parts = PurePosixPath(raw.replace("\\", "/")).parts
    if not parts or raw.startswith("/") or any(p in ("..", ".", "") for p in parts):
        raise UploadSessionError(f"'{raw}' is not a relative file path inside the upload")
    return "/".join(parts)


def upload_session_open(*, user_id: int, path: str, size: int) -> UploadSession:
    """Start receiving one file of ``size`` bytes, within the user's open-upload allowance."""
    if size < 0 or size > int(settings.PORTICO_MAX_UPLOAD_BYTES):
        limit = int(settings.PORTICO_MAX_UPLOAD_BYTES)
        raise UploadSessionError(
            f"'{path}' is {size} bytes; uploads are limited to {limit} bytes", status=413
        )
    _remove_stale()
    with _user_lock(user_id):
        _check_allowance(user_id=user_id, path=path, size=size)
        return _create(user_id=user_id, path=path, size=size)


@contextlib.contextmanager
def _user_lock(user_id: int) -> Iterator[None]:
    """One open at a time per user (across console processes), so two cannot both fit."""
    with (sessions_root() / f".user-{user_id}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _open_sizes(user_id: int) -> list[int]:
    """Declared sizes of the user's open sessions (one being submitted still counts)."""
    sizes = []
    for meta_path in sessions_root().glob("*/meta.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            meta = json.loads(meta_path.read_text())
            if meta["user_id"] == user_id:
                sizes.append(int(meta["size"]))
    return sizes


def _check_allowance(*, user_id: int, path: str, size: int) -> None:
    sizes = _open_sizes(user_id)
    max_sessions = int(settings.PORTICO_UPLOAD_MAX_OPEN_SESSIONS)
    if len(sizes) >= max_sessions:
        raise UploadSessionError(
            f"you already have {len(sizes)} unfinished uploads (the limit is {max_sessions}); "
            f"finish or remove some before adding '{path}'",
            status=429,
        )
    max_bytes = int(settings.PORTICO_UPLOAD_MAX_OPEN_BYTES)
    if sum(sizes) + size > max_bytes:
        raise UploadSessionError(
            f"'{path}' ({size} bytes) would bring your unfinished uploads to "
            f"{sum(sizes) + size} bytes (the limit is {max_bytes}); finish or remove some first",
            status=413,
        )


def _create(*, user_id: int, path: str, size: int) -> UploadSession:
    session_id = uuid.uuid4().hex
    folder = sessions_root() / session_id
    folder.mkdir()
    session = UploadSession(session_id, user_id, clean_relative_path(path), size, folder)
    (folder / "data").touch()
    meta = {"user_id": user_id, "path": session.path, "size": size}
    (folder / "meta.json").write_text(json.dumps(meta))
    return session


def upload_session_get(*, session_id: str, user_id: int) -> UploadSession:
    """The caller's session (another user's session is as good as missing: 404)."""
    folder = sessions_root() / session_id
    if not SESSION_ID_RE.match(session_id) or not (folder / "meta.json").is_file():
        raise UploadSessionError("no such upload session (it may have expired)", status=404)
    meta = json.loads((folder / "meta.json").read_text())
    if meta["user_id"] != user_id:
        raise UploadSessionError("no such upload session (it may have expired)", status=404)
    return UploadSession(session_id, meta["user_id"], meta["path"], meta["size"], folder)


def upload_session_append(session: UploadSession, *, offset: int, chunks: Iterator[bytes]) -> int:
    """Write a chunk that starts at ``offset``; returns the new received offset.

    A chunk at the wrong offset (a retry of one already received, or a gap) is refused with 409
    and the offset to resume from; a chunk running past the declared size is refused whole.
    """
    received = session.received
    if offset != received:
        raise UploadSessionError(
            f"expected a chunk at offset {received}, got {offset}", status=409, offset=received
        )
    written = 0
    max_chunk = int(settings.PORTICO_UPLOAD_CHUNK_MAX_BYTES)
    with session.data_path.open("r+b") as data:
        data.seek(offset)
        for chunk in chunks:
            written += len(chunk)
            if offset + written > session.size or written > max_chunk:
                data.truncate(offset)
                raise UploadSessionError(
                    "chunk runs past the declared file size or the chunk limit", offset=offset
                )
            data.write(chunk)
        data.truncate(offset + written)
    return offset + written


def upload_session_discard(session: UploadSession) -> None:
    shutil.rmtree(session.folder, ignore_errors=True)


def _remove_stale() -> None:
    cutoff = time.time() - STALE_SESSION_S
    for folder in sessions_root().iterdir():
        if folder.is_dir() and folder.stat().st_mtime < cutoff:
            shutil.rmtree(folder, ignore_errors=True)
