"""Hostile models, uploaded over the management API by a deployer and validated by a real Celery
worker with low limits. Each test proves from outside that nothing the model tried changed
anything."""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from repository.models import ApiToken, Event, GoldenRequest, Model, ModelVersion
from repository.services import api_token_create
from tests.conftest import ROOT, LiveWorker, start_live_worker
from tests.repository.archives import make_zip

# Low limits: each hostile test takes seconds, not minutes.
LIMITS: dict[str, Any] = {
    "PORTICO_VALIDATION_TIME_LIMIT_S": 40,
    "PORTICO_VALIDATION_CPU_LIMIT_S": 5,
    "PORTICO_VALIDATION_MEMORY_LIMIT_BYTES": 3 * 1024**3,
    "PORTICO_VALIDATION_MAX_PROCESSES": 256,
    "PORTICO_VALIDATION_MAX_OPEN_FILES": 512,
    "PORTICO_VALIDATION_MAX_FILE_BYTES": 32 * 1024**2,
    "PORTICO_VALIDATION_SCRATCH_BYTES": 64 * 1024**2,
    "PORTICO_VALIDATION_SANDBOX": "bwrap",
}
# Put in the worker's environment; DATABASE_URL and REDIS_URL are the real ones where the tests
# run against PostgreSQL and Redis (on the embedded default the database is the SQLite file).
SECRETS = {
    "SECRET_KEY": "hostile-test-secret-key-0f3a9c",
    "AWS_SECRET_ACCESS_KEY": "hostile-test-aws-secret",
}
SECRET_NAMES = ("SECRET_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "REDIS_URL")
WAIT_S = 120
FINDINGS = re.compile(r"HOSTILE(\{.*?\})HOSTILE", re.S)

MODEL_PY = """
import json

import triton_python_backend_utils as pb_utils

PARAMS = json.loads({params!r})

{attack}


class TritonPythonModel:
    def initialize(self, args):
        findings = attack(PARAMS)
        raise RuntimeError("HOSTILE" + json.dumps(findings, sort_keys=True) + "HOSTILE")

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]) for x in inputs]
"""
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }}]
"""


class Validator:
    """Uploads as the deployer over the API and waits for the version to end."""

    def __init__(self, client: APIClient, worker: LiveWorker) -> None:
        self.client, self.worker = client, worker

    def upload(self, name: str, entries: dict[str, bytes]) -> Any:
        archive = io.BytesIO(make_zip(entries))
        archive.name = f"{name}.zip"
        return self.client.post(
            f"/api/models/{name}/versions/", {"archive": archive}, format="multipart"
        )

    def validated(self, name: str, entries: dict[str, bytes]) -> dict[str, Any]:
        response = self.upload(name, entries)
        assert response.status_code == 202, response.json()
        return self.wait(name, response.json()["version"])

    def wait(self, name: str, number: int) -> dict[str, Any]:
        url = f"/api/models/{name}/versions/{number}/"
        deadline = time.monotonic() + WAIT_S
        while True:
            body = self.client.get(url).json()
            if body["state"] in ("ready", "failed") or time.monotonic() > deadline:
                assert body["state"] in ("ready", "failed"), (body, self.worker.output()[-3000:])
                return body
            time.sleep(0.2)

    def python_model(self, name: str, attack: str, **params: Any) -> dict[str, Any]:
        """Upload a Python model whose ``initialize`` runs ``attack(PARAMS)`` and fails with what
        it found; returns the version JSON once validation ended."""
        model_py = MODEL_PY.format(params=json.dumps(params), attack=attack)
        config = CONFIG.format(name=name).encode()
        return self.validated(name, {"config.pbtxt": config, "1/model.py": model_py.encode()})


def findings(body: dict[str, Any]) -> dict[str, Any]:
    """What the model reported about its own attempts (it fails on purpose, saying so)."""
    text = json.dumps(body["validation"])
    match = FINDINGS.search(text.replace('\\"', '"'))
    assert match, f"the hostile code did not run to its end: {body['validation']}"
    return dict(json.loads(match.group(1)))


@pytest.fixture
def extra_settings() -> dict[str, Any]:
    """Settings a test adds to ``LIMITS`` (parametrize it to override)."""
    return {}


@pytest.fixture
def validator(  # type: ignore[no-untyped-def]
    transactional_db,
    deployer,
    worker_queue: str,
    tmp_path: Path,
    monkeypatch,
    extra_settings: dict[str, Any],
) -> Iterator[Validator]:
    overrides = {**LIMITS, **extra_settings}
    for key, value in overrides.items():
        monkeypatch.setattr(settings, key, value, raising=False)
    monkeypatch.setattr(settings, "UPLOAD_DIR", tmp_path / "uploads")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    worker = start_live_worker(
        tmp_path, queue=worker_queue, time_limit_s=LIMITS["PORTICO_VALIDATION_TIME_LIMIT_S"],
        settings_overrides=overrides,
    )  # fmt: skip
    _, key = api_token_create(user=deployer, role="deployer", name="hostile")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    try:
        yield Validator(client, worker)
    finally:
        worker.stop()


def secret_values() -> list[str]:
    import os

    values = [os.environ.get(name, "") for name in SECRET_NAMES]
    return [v for v in values if v] + [str(settings.SECRET_KEY)]


# --- proof from outside --------------------------------------------------------------------------


class Outside:
    """A picture of everything a model must not touch, taken before it is uploaded."""

    def __init__(self) -> None:
        self.rows = _rows()
        self.blobs = _tree_hashes(Path(settings.STORAGES["blobs"]["OPTIONS"]["location"]))
        self.source = _git_status()
        self.events = set(Event.objects.values_list("pk", flat=True))

    def assert_unchanged(self, hostile_model: str) -> None:
        after = _rows()
        for table, rows in self.rows.items():
            kept = {k: v for k, v in after[table].items() if k in rows}
            assert kept == rows, f"{table} rows changed"
            added = set(after[table]) - set(rows)
            assert all(_belongs_to(table, after[table][k], hostile_model) for k in added), table
        blobs = _tree_hashes(Path(settings.STORAGES["blobs"]["OPTIONS"]["location"]))
        assert {k: blobs.get(k) for k in self.blobs} == self.blobs, "a stored blob changed"
        assert _git_status() == self.source, "the source tree changed"
        new_events = Event.objects.exclude(pk__in=self.events)
        assert {e.model_name for e in new_events} <= {hostile_model}
        assert set(new_events.values_list("action", flat=True)) <= {
            "upload", "validation_started", "validation_failed", "validated",
        }  # fmt: skip


def _rows() -> dict[str, dict[Any, Any]]:
    from django.contrib.auth import get_user_model

    tables = {
        "users": get_user_model().objects.values(),
        "tokens": ApiToken.objects.values(),
        "models": Model.objects.values(),
        "versions": ModelVersion.objects.values(),
        "golden": GoldenRequest.objects.values(),
    }
    return {name: {row["id"]: row for row in rows} for name, rows in tables.items()}


def _belongs_to(table: str, row: dict[str, Any], model_name: str) -> bool:
    if table == "models":
        return bool(row["name"] == model_name)
    if table == "versions":
        return Model.objects.filter(pk=row["model_id"], name=model_name).exists()
    return False


def _tree_hashes(root: Path) -> dict[str, str]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _git_status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@pytest.fixture
def outside(validator: Validator, deployer) -> Outside:  # type: ignore[no-untyped-def]
    """Another model's version already stored and validated (its blob and row must survive),
    then the picture."""
    validator.validated("victim", {"1/model.onnx": b"victim weights"})
    return Outside()


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.received.append(conn.recv(65536) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()
