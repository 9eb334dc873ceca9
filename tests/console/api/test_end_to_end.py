"""A script's view of the platform: a token from ``create_token``, real ONNX models uploaded over
the API, validated by a real Celery worker running the real check, promoted, rolled back, golden
requests recorded. The worker process shares the test database (a file with SQLite)."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from repository.demo_models import write_corrupt_onnx, write_onnx_mlp

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

TERMINAL = {"ready", "failed", "promoted", "retired"}
WAIT_S = 180.0


def create_token(username: str, role: str) -> APIClient:
    out = io.StringIO()
    call_command("create_token", username, "--role", role, stdout=out)
    key = out.getvalue().strip()
    assert key and "\n" not in key  # the key alone on stdout
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def zipped(model_dir: Path) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path in sorted(model_dir.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(model_dir).as_posix())
    buf.seek(0)
    buf.name = f"{model_dir.name}.zip"
    return buf


def wait_for(client: APIClient, url: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        body = client.get(url).json()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.25)


def upload_and_wait(client: APIClient, name: str, data: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/api/models/{name}/versions/", data, format="multipart")
    assert response.status_code == 202, response.json()
    assert response.json()["state"] == "uploaded"
    return wait_for(client, response.json()["url"], lambda body: body["state"] in TERMINAL)


def test_token_script_uploads_validates_promotes_and_rolls_back(live_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = create_token("ci-bot", "deployer")
    repo = tmp_path / "models"
    v1_dir = write_onnx_mlp(repo, "mlp", 1, sizes=(4, 8, 2), max_batch_size=8)
    v1 = upload_and_wait(client, "mlp", {"archive": zipped(v1_dir)})
    assert v1["state"] == "ready", (v1["validation"], live_worker.output()[-3000:])
    assert all(step["status"] in ("passed", "skipped") for step in v1["validation"]["steps"])
    assert 'name: "mlp"' in v1["config"]

    # The second version: the model file alone, its config auto-completed from the artifact.
    v2_dir = write_onnx_mlp(tmp_path / "v2", "mlp", 1, sizes=(4, 8, 2), seed=1, with_config=False)
    model_bytes = (v2_dir / "1" / "model.onnx").read_bytes()
    onnx_file = io.BytesIO(model_bytes)
    onnx_file.name = "model.onnx"
    v2 = upload_and_wait(client, "mlp", {"file": onnx_file})
    assert v2["state"] == "ready", v2["validation"]
    assert v2["version"] == 2 and v2["autocompleted_fields"]

    assert client.post("/api/models/mlp/versions/1/promote/").json()["state"] == "promoted"
    assert client.post("/api/models/mlp/versions/2/promote/").json()["state"] == "promoted"
    rolled = client.post("/api/models/mlp/rollback/")
    assert rolled.status_code == 200
    assert (rolled.json()["version"], rolled.json()["state"]) == (1, "promoted")
    listed = client.get("/api/models/").json()
    assert [(m["name"], m["promoted_version"]) for m in listed] == [("mlp", 1)]

    golden = client.post(
        "/api/models/mlp/golden/",
        {
            "name": "ones",
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}],
        },
        format="json",
    )
    assert golden.status_code == 202, golden.json()
    url = f"/api/models/mlp/golden/{golden.json()['id']}/"
    recorded = wait_for(client, url, lambda body: body["state"] != "recording")
    assert recorded["state"] == "recorded", recorded
    assert recorded["expected_outputs"]["OUTPUT0"]["shape"] == [1, 2]

    actions = [e["action"] for e in client.get("/api/events/?model=mlp").json()["results"]]
    assert {"upload", "validated", "promote", "rollback", "golden_record"} <= set(actions)


def test_broken_model_fails_validation_with_the_reason(live_worker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = create_token("ci-bot", "deployer")
    model_dir = write_corrupt_onnx(tmp_path / "models", "broken", 1)
    body = upload_and_wait(client, "broken", {"archive": zipped(model_dir)})
    assert body["state"] == "failed", body
    failed = [step for step in body["validation"]["steps"] if step["status"] == "failed"]
    assert failed and failed[0]["message"]
    refused = client.post("/api/models/broken/versions/1/promote/")
    assert refused.status_code == 409 and refused.json()["code"] == "invalid_state"


def test_a_cpu_worker_keeps_the_written_placement_and_leaves_the_gpu_check_to_a_gpu_replica(  # type: ignore[no-untyped-def]
    live_worker, tmp_path
) -> None:
    from datetime import UTC, datetime

    from repository import facade

    client = create_token("gpu-bot", "deployer")
    gpu_dir = write_onnx_mlp(tmp_path / "g", "gpu_mlp", 1, sizes=(4, 8, 2), max_batch_size=8)
    config = gpu_dir / "config.pbtxt"
    config.write_text(config.read_text() + "\ninstance_group { kind: KIND_GPU gpus: [ 0, 1 ] }\n")
    auto_dir = write_onnx_mlp(tmp_path / "a", "auto_mlp", 1, sizes=(4, 8, 2), max_batch_size=8)

    gpu = upload_and_wait(client, "gpu_mlp", {"archive": zipped(gpu_dir)})
    auto = upload_and_wait(client, "auto_mlp", {"archive": zipped(auto_dir)})
    assert gpu["state"] == "ready", (gpu["validation"], live_worker.output()[-3000:])
    assert auto["state"] == "ready", auto["validation"]
    # Stored as written: KIND_GPU on GPUs 0 and 1, KIND_AUTO left for each replica to resolve.
    assert "gpus: 0\n  gpus: 1\n  kind: KIND_GPU" in gpu["config"]
    assert "KIND_CPU" not in auto["config"] and "KIND_GPU" not in auto["config"]
    assert gpu["gpu_check"]["state"] == "pending"
    assert gpu["gpu_check"]["message"].startswith("this validation worker: no NVIDIA GPU")
    assert auto["gpu_check"] == {"state": "", "message": "", "replica": "", "checked_at": None}
    load = next(s for s in gpu["validation"]["steps"] if s["name"] == "load")
    assert "on the CPU runtime; GPU check pending" in load["message"]

    # A GPU replica's heartbeat reports the outcome; the registry records it on the version.
    now = datetime.now(tz=UTC)
    row = {"model": "gpu_mlp", "version": 1, "state": "READY", "reason": ""}
    report = {"ok": True, "message": "warm-up and 0 golden request(s) passed on GPU 0, 1"}
    facade.replica_heartbeat(
        replica_id="gpu-replica", address="gpu:8000", http_url="http://gpu:8000",
        started_at=now, versions=[row | {"gpu_check": report}], last_error="",
    )  # fmt: skip
    checked = client.get("/api/models/gpu_mlp/versions/1/").json()["gpu_check"]
    assert (checked["state"], checked["replica"]) == ("passed", "gpu-replica")
    assert checked["message"] == report["message"] and checked["checked_at"]
