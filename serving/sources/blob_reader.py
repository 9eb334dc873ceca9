"""How a registry replica reads blobs, chosen from the registry's description of its store.

S3 is read with boto3 and a folder directly, so fetching artifacts needs neither Django nor the
registry's thread; any other storage backend is read through the registry's ``blob_open``. Every
reader hands back raw bytes: the blob cache checks their sha256 before anything uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

from serving.sources.s3 import S3Bucket

BlobOpener = Callable[[str], BinaryIO]


class BlobStoreLike(Protocol):
    """``repository.facade.BlobStore`` as serving sees it."""

    @property
    def kind(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def bucket(self) -> str: ...
    @property
    def endpoint_url(self) -> str: ...
    @property
    def region(self) -> str: ...
    def object_name(self, sha256: str) -> str: ...


def blob_opener(store: BlobStoreLike, *, fallback: BlobOpener) -> BlobOpener:
    """A function opening a blob by its sha256 for reading."""
    if store.kind == "s3":
        bucket = S3Bucket(store.bucket, endpoint_url=store.endpoint_url, region=store.region)
        return lambda sha256: bucket.open(store.object_name(sha256))
    if store.kind == "filesystem":
        root = Path(store.location)
        return lambda sha256: (root / store.object_name(sha256)).open("rb")
    return fallback
