"""Fixtures for the management API tests: clients signed in per role, token clients, and a
scripted validation check (the real ``serving.check`` runs in the end-to-end tests)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from repository.models import ModelVersion
from repository.services import api_token_create, model_version_validate
from tests.factories import UserFactory

GOOD_CONFIG = 'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'


@pytest.fixture(autouse=True)
def api_settings(settings, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTICO_VALIDATION_CHECK_MODULE = "tests.repository.validation.fake_check"
    monkeypatch.setenv("FAKE_CHECK", "ok")


@pytest.fixture
def nobody(db):  # type: ignore[no-untyped-def]
    """A signed-in user who holds no role."""
    return UserFactory(username="nobody")


@pytest.fixture
def anon() -> APIClient:
    return APIClient()


def signed_in(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def token_client(user: Any, role: str) -> APIClient:
    _, key = api_token_create(user=user, role=role, name="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def as_viewer(viewer) -> APIClient:  # type: ignore[no-untyped-def]
    return signed_in(viewer)


@pytest.fixture
def as_deployer(deployer) -> APIClient:  # type: ignore[no-untyped-def]
    return signed_in(deployer)


@pytest.fixture
def as_admin(registry_admin) -> APIClient:  # type: ignore[no-untyped-def]
    return signed_in(registry_admin)


@pytest.fixture
def as_second_admin(second_admin) -> APIClient:  # type: ignore[no-untyped-def]
    return signed_in(second_admin)


def model_file(content: bytes = b"weights", name: str = "model.onnx") -> io.BytesIO:
    f = io.BytesIO(content)
    f.name = name
    return f


def zip_archive(entries: dict[str, bytes], name: str = "model.zip") -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for path, content in entries.items():
            archive.writestr(path, content)
    buf.seek(0)
    buf.name = name
    return buf


@pytest.fixture
def upload(as_deployer: APIClient) -> Callable[..., Any]:
    """POST a single-file upload for ``name`` as the deployer; returns the response."""

    def post(name: str = "m", *, config: str | None = None, client: APIClient | None = None) -> Any:
        data: dict[str, Any] = {"file": model_file()}
        data["config"] = GOOD_CONFIG.format(name=name) if config is None else config
        return (client or as_deployer).post(
            f"/api/models/{name}/versions/", data, format="multipart"
        )

    return post


def validate(model: str, number: int) -> ModelVersion:
    """Run the validation task's service inline, as the worker would."""
    version = ModelVersion.objects.get(model__name=model, number=number)
    model_version_validate(version_id=version.pk)
    version.refresh_from_db()
    return version


@pytest.fixture
def ready_version(upload) -> Callable[..., ModelVersion]:  # type: ignore[no-untyped-def]
    """Upload and validate a version of ``name`` through the API; returns it ready."""

    def make(name: str = "m") -> ModelVersion:
        response = upload(name)
        assert response.status_code == 202, response.json()
        version = validate(name, response.json()["version"])
        assert version.state == "ready", version.validation_steps
        return version

    return make


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the API's error JSON with ``status`` (and ``code``)."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"message", "code", "extra"}, body
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["extra"], dict)
    if code is not None:
        assert body["code"] == code, body
    return body
