"""An ``s3://`` model repository, served as tritonserver serves one: through a local copy.

``DirectorySource`` serves the copy like any folder. ``sync`` lists the repository's prefix (one
model's, or all of it) and brings the copy up to date: objects new or changed since the last sync
(by size and ETag) are downloaded, files whose objects are gone are removed. Poll mode syncs before
each scan and explicit mode before each load, so both see what the bucket holds at that moment.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path, PurePosixPath

from serving.sources.s3 import ObjectInfo, S3Bucket, parse_s3_url

logger = logging.getLogger("serving.sources.s3_repository")


class S3RepositoryMirror:
    """The local copy of one ``s3://`` repository, in ``local`` (a folder of its own under
    ``cache_dir``, or a temporary one removed by ``close``)."""

    def __init__(self, url: str, *, cache_dir: Path | None = None) -> None:
        self.location = parse_s3_url(url)
        self.bucket = S3Bucket(self.location.bucket, endpoint_url=self.location.endpoint_url)
        self._temporary = cache_dir is None
        if cache_dir is None:
            self.local = Path(tempfile.mkdtemp(prefix="portico-s3-repository-"))
        else:
            self.local = cache_dir / "s3-repository"
            self.local.mkdir(parents=True, exist_ok=True)
        self._synced: dict[str, tuple[int, str]] = {}  # relative path -> (size, etag)
        self._lock = threading.Lock()  # NOTE: two explicit loads of one model sync one at a time

    def sync(self, model: str | None = None) -> None:
        """Bring the copy of ``model`` (None: of every model) up to date with the bucket."""
        with self._lock:
            self._sync(model)

    def _sync(self, model: str | None) -> None:
        root = self.location.prefix
        prefix = "/".join(p for p in (root, model or "") if p)
        listed = self.bucket.objects(f"{prefix}/" if prefix else "")
        remote = {rel: info for info in listed if (rel := self._relative(info.key)) is not None}
        for relative, info in sorted(remote.items()):
            if self._synced.get(relative) != (info.size, info.etag):
                self.bucket.download(info.key, self.local / relative)
                self._synced[relative] = (info.size, info.etag)
        self._remove_missing(remote, under=model)

    def close(self) -> None:
        if self._temporary:
            shutil.rmtree(self.local, ignore_errors=True)

    def _relative(self, key: str) -> str | None:
        """The object's path in the copy; None for folder markers and keys that would escape."""
        root = self.location.prefix
        relative = key[len(root) + 1 :] if root else key
        parts = PurePosixPath(relative).parts
        if key.endswith("/") or not parts or ".." in parts or relative.startswith("/"):
            if not key.endswith("/"):
                logger.warning("%s: not a path inside the repository; ignored", key)
            return None
        return relative

    def _remove_missing(self, remote: dict[str, ObjectInfo], *, under: str | None) -> None:
        scope = self.local / under if under else self.local
        if not scope.is_dir():
            return
        for path in sorted(scope.rglob("*"), reverse=True):
            relative = path.relative_to(self.local).as_posix()
            if path.is_file() and relative not in remote:
                path.unlink()
                self._synced.pop(relative, None)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
