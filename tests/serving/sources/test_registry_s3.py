"""A registry replica whose blobs live in S3 (a real S3-protocol server on loopback): it starts
from an empty cache, reads the objects with boto3 alone and refuses one whose bytes changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from repository.blobs import blob_name
from serving.main import ServingProcess
from tests.s3_server import S3Server
from tests.serving.harness import identity_input
from tests.serving.sources.test_registry import (
    identity_onnx,
    promote,
    registry_settings,
    registry_version,
    retrying,
    wait_for,
)

pytestmark = [pytest.mark.embedded, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]


def served_version(client: httpclient.InferenceServerClient) -> str:
    x = np.ones((1, 3), dtype=np.float32)
    return str(client.infer("ident", [identity_input(x)]).get_response()["model_version"])


def test_replica_with_an_empty_cache_downloads_promoted_blobs_from_the_bucket(
    s3_blobs: tuple[S3Server, str], tmp_path: Path
) -> None:
    onnx, config = identity_onnx(tmp_path)
    v1 = registry_version("ident", 1, onnx, config)
    promote(v1)
    sha = v1.files.get().blob_id
    assert not (tmp_path / "cache").exists()
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert served_version(client) == "1"
        assert (tmp_path / "cache" / "blobs" / sha).read_bytes() == onnx
        client.close()


def test_changed_object_is_refused_and_the_promoted_version_keeps_serving(
    s3_blobs: tuple[S3Server, str], tmp_path: Path
) -> None:
    s3, bucket = s3_blobs
    onnx, config = identity_onnx(tmp_path)
    promote(registry_version("ident", 1, onnx, config))
    with ServingProcess(registry_settings(tmp_path)) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert served_version(client) == "1"
        v2 = retrying(lambda: registry_version("ident", 2, onnx + b"\x00", config))
        sha = v2.files.get().blob_id
        s3.client().put_object(
            Bucket=bucket, Key=f"portico/blobs/{blob_name(sha)}", Body=b"not what was uploaded"
        )
        promote(v2)

        def reason() -> str:
            index = {(m["name"], m.get("version")): m for m in client.get_model_repository_index()}
            return str(index.get(("ident", "2"), {}).get("reason", ""))

        wait_for(lambda: "corrupt" in reason())
        assert f"blob {sha[:12]} is corrupt" in reason() and "refusing to load it" in reason()
        assert served_version(client) == "1"
        assert not (tmp_path / "cache" / "blobs" / sha).exists()
        client.close()


def test_reading_blobs_from_s3_imports_no_django(aws_env: S3Server) -> None:
    """The reader a replica builds from the registry's description: boto3, nothing of Django."""
    bucket = aws_env.new_bucket()
    aws_env.client().put_object(Bucket=bucket, Key=f"p/{blob_name('ab' * 32)}", Body=b"bytes")
    store = {"kind": "s3", "location": "", "bucket": bucket, "prefix": "p", "endpoint_url": "",
             "region": ""}  # fmt: skip
    script = (
        "import dataclasses, json, sys\n"
        "from serving.sources.blob_reader import blob_opener\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class Store:\n"
        "    kind: str; location: str; bucket: str; prefix: str; endpoint_url: str; region: str\n"
        "    def object_name(self, sha): return f'{self.prefix}/{sha[:2]}/{sha[2:4]}/{sha}'\n"
        f"opener = blob_opener(Store(**json.loads({json.dumps(store)!r})), fallback=None)\n"
        "with opener('ab' * 32) as body: print(body.read().decode())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'repository')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["bytes", "[]"]
