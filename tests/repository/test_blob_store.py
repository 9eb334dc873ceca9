"""Blob storage in an S3-compatible bucket through django-storages, against a real S3-protocol
server: settings from the environment, content stored once, and the facade's description of the
store that serving reads with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from repository import facade
from repository.blobs import blob_copy_verified, blob_name, blob_store_file
from repository.errors import BlobIntegrityError
from tests.s3_server import S3Server

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

ROOT = Path(__file__).resolve().parents[2]


def keys(server: S3Server, bucket: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(item["Key"] for item in listed)


def test_blobs_are_stored_once_in_the_bucket_under_the_prefix(
    s3_blobs: tuple[S3Server, str], tmp_path: Path
) -> None:
    server, bucket = s3_blobs
    (tmp_path / "a.onnx").write_bytes(b"weights")
    (tmp_path / "b.onnx").write_bytes(b"weights")  # the same content under another name
    first, second = blob_store_file(tmp_path / "a.onnx"), blob_store_file(tmp_path / "b.onnx")
    assert first.sha256 == second.sha256
    assert keys(server, bucket) == [f"portico/blobs/{blob_name(first.sha256)}"]
    blob_copy_verified(first.sha256, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == b"weights"


def test_a_changed_object_fails_the_checksum_when_copied(
    s3_blobs: tuple[S3Server, str], tmp_path: Path
) -> None:
    server, bucket = s3_blobs
    (tmp_path / "a.onnx").write_bytes(b"weights")
    blob = blob_store_file(tmp_path / "a.onnx")
    server.client().put_object(
        Bucket=bucket, Key=f"portico/blobs/{blob_name(blob.sha256)}", Body=b"other bytes"
    )
    with pytest.raises(BlobIntegrityError):
        blob_copy_verified(blob.sha256, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_facade_describes_the_s3_store_without_django_objects(
    s3_blobs: tuple[S3Server, str],
) -> None:
    _, bucket = s3_blobs
    store = facade.blob_store()
    assert store == facade.BlobStore(kind="s3", bucket=bucket, prefix="portico/blobs")
    assert store.object_name("ab" * 32) == f"portico/blobs/ab/ab/{'ab' * 32}"


def test_facade_describes_the_default_store_as_a_folder(settings: Any) -> None:
    store = facade.blob_store()
    assert store.kind == "filesystem"
    assert store.location == settings.STORAGES["blobs"]["OPTIONS"]["location"]
    assert store.object_name("cd" * 32) == f"cd/cd/{'cd' * 32}"


def test_settings_from_the_environment_write_to_the_configured_bucket(aws_env: S3Server) -> None:
    """PORTICO_BLOB_* name the bucket, prefix, endpoint and region; the key comes only from the
    standard AWS variables (the server checks every signature)."""
    bucket = aws_env.new_bucket()
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings.base", PYTHONPATH=str(ROOT),
        PORTICO_BLOB_STORAGE="s3", PORTICO_BLOB_S3_BUCKET=bucket,
        PORTICO_BLOB_S3_PREFIX="/site/blobs/", PORTICO_BLOB_S3_ENDPOINT_URL=aws_env.endpoint_url,
        PORTICO_BLOB_S3_REGION="us-east-1",
    )  # fmt: skip
    script = (
        "import dataclasses, json, django; django.setup()\n"
        "from django.core.files.base import ContentFile\n"
        "from repository.blobs import blob_storage, blob_store_describe\n"
        "blob_storage().save('ab/cd/abcd', ContentFile(b'stored'))\n"
        "print(json.dumps(dataclasses.asdict(blob_store_describe())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "kind": "s3", "location": "", "bucket": bucket, "prefix": "site/blobs",
        "endpoint_url": aws_env.endpoint_url, "region": "us-east-1",
    }  # fmt: skip
    body = aws_env.client().get_object(Bucket=bucket, Key="site/blobs/ab/cd/abcd")["Body"]
    assert body.read() == b"stored"
