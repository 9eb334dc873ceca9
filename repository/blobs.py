"""Content-addressed artifact storage through Django's storage API (alias ``"blobs"``).

A blob's name is derived from its sha256 (``ab/cd/abcd…``), so identical files are stored once and a
stored blob is never rewritten. Pointing ``STORAGES["blobs"]`` at an S3-compatible backend moves the
artifacts there with no code change; ``blob_store_describe`` tells readers outside Django (serving)
where to find them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import BinaryIO

from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages

from repository.errors import BlobIntegrityError
from repository.models import Blob

CHUNK_BYTES = 1024 * 1024


def blob_storage() -> Storage:
    return storages["blobs"]


def blob_name(sha256: str) -> str:
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"


@dataclasses.dataclass(frozen=True)
class BlobStore:
    """Where the blobs live, for a reader that does not go through Django.

    ``kind`` is ``"filesystem"`` (``location``: the folder), ``"s3"`` (``bucket``, ``prefix``, and
    the ``endpoint_url`` and ``region`` when configured; credentials are the reader's own, from
    boto3's default chain) or ``"storage"`` (another backend: read through ``blob_open``).
    """

    kind: str
    location: str = ""
    bucket: str = ""
    prefix: str = ""
    endpoint_url: str = ""
    region: str = ""

    def object_name(self, sha256: str) -> str:
        """The blob's key in the bucket, or its path under ``location``."""
        return f"{self.prefix}/{blob_name(sha256)}" if self.prefix else blob_name(sha256)


def blob_store_describe() -> BlobStore:
    """The blob store as configured in ``STORAGES["blobs"]``, with no Django object in it."""
    storage = blob_storage()
    if isinstance(storage, FileSystemStorage):
        return BlobStore(kind="filesystem", location=str(storage.location))
    from storages.backends.s3 import S3Storage

    if isinstance(storage, S3Storage):
        return BlobStore(
            kind="s3",
            bucket=storage.bucket_name,
            prefix=storage.location.strip("/"),
            endpoint_url=storage.endpoint_url or "",
            region=storage.region_name or "",
        )
    return BlobStore(kind="storage")


def file_sha256(path: Path) -> tuple[str, int]:
    """The sha256 and size of a file on disk, read in chunks (never all in memory)."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def blob_store_file(path: Path) -> Blob:
    """Store a file's content once and return its Blob row (known content is not copied)."""
    sha256, size = file_sha256(path)
    storage = blob_storage()
    name = blob_name(sha256)
    known = Blob.objects.filter(sha256=sha256).exists()
    if not known or not storage.exists(name):
        # NOTE: content without a row (left by a rolled-back upload) is written again rather than
        # trusted: nothing has vouched for it.
        if storage.exists(name):
            storage.delete(name)
        with path.open("rb") as f:
            saved = storage.save(name, File(f, name=sha256))
        if saved != name:
            # A concurrent upload of the same content won the race; its copy is identical.
            storage.delete(saved)
    blob, _ = Blob.objects.get_or_create(sha256=sha256, defaults={"size": size})
    return blob


def blob_open(sha256: str) -> BinaryIO:
    """Open a stored blob for reading (binary)."""
    return blob_storage().open(blob_name(sha256), "rb")  # type: ignore[no-any-return]


def blob_copy_verified(sha256: str, target: Path) -> int:
    """Copy a blob to ``target`` checking its sha256 (BlobIntegrityError on mismatch)."""
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with blob_open(sha256) as src, target.open("wb") as dst:
        while chunk := src.read(CHUNK_BYTES):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
    if digest.hexdigest() != sha256:
        target.unlink(missing_ok=True)
        raise BlobIntegrityError(sha256, digest.hexdigest())
    return size
