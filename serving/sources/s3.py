"""S3-compatible object storage, read with boto3 alone (no Django): registry blobs and ``s3://``
model repositories.

Credentials always come from boto3's default chain (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, a profile, a container or instance role); so do the endpoint
(``AWS_ENDPOINT_URL``) and the region (``AWS_DEFAULT_REGION``) unless they are given. Each
``S3Bucket`` has a boto3 session of its own, which reads the environment when the bucket is made.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from serving.errors import UnavailableError

# Triton's forms: s3://bucket/path, s3://host:port/bucket/path, s3://https://host:port/bucket/path
_ENDPOINT = re.compile(r"^(?:(?P<scheme>https?)://)?(?P<host>[^/:]+):(?P<port>\d+)/(?P<rest>.*)$")


class ObjectStoreError(UnavailableError):
    """An object could not be listed or read (missing, access refused, store unreachable)."""


@dataclasses.dataclass(frozen=True)
class S3Location:
    """A bucket, a key prefix in it (no slash at either end) and, for a private S3-compatible
    server, its endpoint URL."""

    bucket: str
    prefix: str
    endpoint_url: str = ""


def parse_s3_url(url: str) -> S3Location:
    """Parse a repository URL the way tritonserver's ``--model-repository`` does.

    ``s3://bucket/path`` (AWS or ``AWS_ENDPOINT_URL``), ``s3://host:port/bucket/path`` (an
    S3-compatible server over HTTP) and ``s3://https://host:port/bucket/path`` (over HTTPS).
    """
    if not url.startswith("s3://"):
        raise ValueError(f"'{url}': an S3 repository URL starts with s3://")
    rest = url[len("s3://") :]
    endpoint = ""
    match = _ENDPOINT.match(rest)
    if match:
        scheme = match["scheme"] or "http"
        endpoint = f"{scheme}://{match['host']}:{match['port']}"
        rest = match["rest"]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"'{url}': no bucket name")
    return S3Location(bucket=bucket, prefix=prefix.strip("/"), endpoint_url=endpoint)


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str


class S3Bucket:
    """One bucket: open, list and download objects; every failure is an ``ObjectStoreError``
    that names the object and says why."""

    def __init__(self, bucket: str, *, endpoint_url: str = "", region: str = "") -> None:
        import boto3

        self.bucket = bucket
        session = boto3.session.Session()
        self._client: Any = session.client(
            "s3", endpoint_url=endpoint_url or None, region_name=region or None
        )

    def open(self, key: str) -> BinaryIO:
        """A stream of the object's bytes (close it, or use it in a ``with``)."""
        with self._explained(key):
            body: BinaryIO = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            return body

    def objects(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``."""
        with self._explained(prefix):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", []):
                    yield ObjectInfo(key=item["Key"], size=item["Size"], etag=item["ETag"])

    def download(self, key: str, target: Path) -> None:
        """Copy an object to ``target`` (written next to it first, then renamed into place)."""
        partial = target.with_name(f".{target.name}.partial")
        target.parent.mkdir(parents=True, exist_ok=True)
        with self.open(key) as body, partial.open("wb") as out, self._explained(key):
            while chunk := body.read(1024 * 1024):
                out.write(chunk)
        partial.replace(target)

    def _explained(self, key: str) -> _Explained:
        return _Explained(f"s3://{self.bucket}/{key}")


class _Explained:
    """Turns boto3's exceptions into an ``ObjectStoreError`` naming the object."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            raise ObjectStoreError(
                f"{self.where}: {error.get('Code', 'error')}: {error.get('Message', exc)}"
            ) from exc
        if isinstance(exc, BotoCoreError):
            raise ObjectStoreError(f"{self.where}: {exc}") from exc
