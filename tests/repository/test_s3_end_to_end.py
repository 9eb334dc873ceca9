"""Artifacts in S3 from upload to inference, against a real S3-protocol server on loopback: models
uploaded over the management API, validated by a real Celery worker (blobs land in the bucket, the
worker materialises them for the check), promoted, and served by a replica that starts with an
empty cache and downloads them; a changed object is refused while the old version keeps serving.
Every process takes its key from the standard AWS variables alone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from django.db import OperationalError
from rest_framework.test import APIClient

from repository import demo_models as dm
from repository.blobs import blob_name
from repository.models import ModelVersion
from serving.main import ServingProcess
from serving.settings import ServingSettings
from tests.conftest import LiveWorker, start_live_worker
from tests.console.api.test_end_to_end import create_token, zipped
from tests.s3_server import S3Server
from tests.serving.harness import identity_input

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

TERMINAL = {"ready", "failed", "promoted", "retired"}
WAIT_S = 180.0


@pytest.fixture
def s3_worker(  # type: ignore[no-untyped-def]
    s3_blobs, transactional_db, worker_queue: str, tmp_path: Path
) -> Iterator[LiveWorker]:
    """A real Celery worker whose blob store is the test bucket (started after it is set)."""
    worker = start_live_worker(tmp_path, queue=worker_queue)
    yield worker
    worker.stop()


def upload_and_wait(client: APIClient, name: str, model_dir: Path) -> dict[str, Any]:
    response = client.post(
        f"/api/models/{name}/versions/", {"archive": zipped(model_dir)}, format="multipart"
    )
    assert response.status_code == 202, response.json()
    deadline = time.monotonic() + WAIT_S
    while True:
        body: dict[str, Any] = client.get(response.json()["url"]).json()
        if body["state"] in TERMINAL or time.monotonic() > deadline:
            return body
        time.sleep(0.25)


def promote(client: APIClient, name: str, number: int) -> dict[str, Any]:
    """POST promote, retrying while SQLite's test database is locked by the replica's reader."""
    for _ in range(100):
        try:
            response = client.post(f"/api/models/{name}/versions/{number}/promote/")
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.05)
            continue
        assert response.status_code == 200, response.json()
        return dict(response.json())
    raise AssertionError("the database stayed locked")


def blob_keys(server: S3Server, bucket: str) -> set[str]:
    listed = server.client().list_objects_v2(Bucket=bucket).get("Contents", [])
    return {item["Key"] for item in listed}


def version_blobs(name: str, number: int) -> set[str]:
    version = ModelVersion.objects.get(model__name=name, number=number)
    return set(version.files.values_list("blob_id", flat=True))


def local_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()


def replica_settings(cache: Path) -> ServingSettings:
    return ServingSettings(
        model_repository=None, host="127.0.0.1", http_port=0, grpc_port=-1, metrics_port=-1,
        cache_dir=cache, registry_poll_s=0.2, heartbeat_interval_s=0.3, exit_timeout_s=5.0,
        cpu_count=1, replica_id="s3-replica", redis_url=os.environ.get("REDIS_URL", ""),
        inference_auth="off",  # storage is under test here; tests/serving/access covers tokens
    )  # fmt: skip


def served_version(client: httpclient.InferenceServerClient) -> str:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = client.infer("ident", [identity_input(x)])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    return str(result.get_response()["model_version"])


def wait_for(predicate: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def test_upload_validate_promote_and_serve_from_s3_refusing_a_changed_object(  # type: ignore[no-untyped-def]
    s3_blobs: tuple[S3Server, str], s3_worker: LiveWorker, settings, tmp_path: Path
) -> None:
    server, bucket = s3_blobs
    client = create_token("ci-bot", "deployer")
    local = Path(settings.VAR_DIR, "blobs")  # the filesystem store other tests use
    local_before = local_files(local)
    v1_dir = dm.write_onnx_identity(tmp_path / "v1", "ident", dims=(-1,), max_batch_size=8)
    v1 = upload_and_wait(client, "ident", v1_dir)
    assert v1["state"] == "ready", (v1["validation"], s3_worker.output()[-3000:])
    v1_keys = {f"portico/blobs/{blob_name(sha)}" for sha in version_blobs("ident", 1)}
    assert v1_keys and v1_keys <= blob_keys(server, bucket)
    assert local_files(local) == local_before  # nothing went to a local folder
    assert promote(client, "ident", 1)["state"] == "promoted"

    cache = tmp_path / "empty-cache"
    with ServingProcess(replica_settings(cache)) as replica:
        infer = httpclient.InferenceServerClient(replica.http_url)
        assert served_version(infer) == "1"
        assert {p.name for p in (cache / "blobs").iterdir()} == version_blobs("ident", 1)

        # v2: other weights' bytes (a different blob), validated, then changed in the bucket.
        v2_dir = dm.write_onnx_identity(tmp_path / "v2", "ident", dims=(-1,), max_batch_size=8)
        (v2_dir / "1" / "notes.txt").write_text("second upload")
        v2 = upload_and_wait(client, "ident", v2_dir)
        assert v2["state"] == "ready", v2["validation"]
        (changed,) = version_blobs("ident", 2) - version_blobs("ident", 1)
        server.client().put_object(
            Bucket=bucket, Key=f"portico/blobs/{blob_name(changed)}", Body=b"other bytes"
        )
        assert promote(client, "ident", 2)["state"] == "promoted"

        def refused() -> bool:
            index = {(m["name"], m.get("version")): m for m in infer.get_model_repository_index()}
            return "corrupt" in index.get(("ident", "2"), {}).get("reason", "")

        wait_for(refused)
        index = {(m["name"], m.get("version")): m for m in infer.get_model_repository_index()}
        assert f"blob {changed[:12]} is corrupt" in index[("ident", "2")]["reason"]
        assert served_version(infer) == "1"
        assert not (cache / "blobs" / changed).exists()
        infer.close()
