"""Validation with the real ``serving.check`` child on real ONNX, TorchScript and Python models."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from repository import demo_models
from repository.models import VersionState
from repository.services import model_version_create_from_upload, model_version_validate
from tests.repository.archives import make_zip

pytestmark = pytest.mark.django_db

STEPS = ["parse", "checksums", "config", "load", "io", "warmup", "golden", "verify-config"]


@pytest.fixture(autouse=True)
def uploads(settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"


def zip_model(model_dir: Path) -> bytes:
    return make_zip(
        {
            p.relative_to(model_dir).as_posix(): p.read_bytes()
            for p in model_dir.rglob("*")
            if p.is_file()
        }
    )


def upload_and_validate(user, model_dir: Path, name: str | None = None):  # type: ignore[no-untyped-def]
    version = model_version_create_from_upload(
        model_name=name or model_dir.name,
        uploaded_by=user,
        archive=io.BytesIO(zip_model(model_dir)),
        archive_name="m.zip",
    )
    model_version_validate(version_id=version.pk)
    version.refresh_from_db()
    return version


def step(version, name: str) -> dict:  # type: ignore[no-untyped-def]
    return next(s for s in version.validation_steps if s["name"] == name)


def test_onnx_model_validates_with_autocompleted_config(deployer, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    model_dir = demo_models.write_onnx_mlp(
        model_repo, name="mlp", with_config=False, sizes=(8, 16, 4)
    )
    version = upload_and_validate(deployer, model_dir)
    assert version.state == VersionState.READY, version.validation_error
    assert [s["name"] for s in version.validation_steps] == STEPS
    assert 'platform: "onnxruntime_onnx"' in version.config_text
    assert "input" in " ".join(version.autocompleted_fields)
    assert not version.needs_approval


def test_torchscript_model_validates(deployer, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    version = upload_and_validate(deployer, demo_models.write_torchscript_add_sub(model_repo))
    assert version.state == VersionState.READY, version.validation_error
    assert version.backend == "pytorch"


def test_python_model_validates_and_needs_approval(deployer, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    version = upload_and_validate(deployer, demo_models.write_python_add_sub(model_repo))
    assert version.state == VersionState.READY, version.validation_error
    assert version.backend == "python" and version.needs_approval


def test_corrupt_onnx_fails_at_load(deployer, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    version = upload_and_validate(deployer, demo_models.write_corrupt_onnx(model_repo))
    assert version.state == VersionState.FAILED
    failed = [s["name"] for s in version.validation_steps if s["status"] == "failed"]
    assert failed in (["load"], ["config"])
    assert version.validation_error.startswith(failed[0] + ":")
    assert version.config_text == ""


def test_config_that_disagrees_with_the_model_fails_naming_the_tensor(  # type: ignore[no-untyped-def]
    deployer, model_repo: Path
) -> None:
    version = upload_and_validate(deployer, demo_models.write_onnx_mismatched_config(model_repo))
    assert version.state == VersionState.FAILED
    assert (
        step(version, "io")["status"] == "failed" or step(version, "config")["status"] == "failed"
    )
    assert "INPUT0" in version.validation_error or "OUTPUT0" in version.validation_error


def test_unknown_config_field_fails_naming_the_field(deployer, model_repo: Path) -> None:  # type: ignore[no-untyped-def]
    model_dir = demo_models.write_onnx_mlp(model_repo, name="mlp", sizes=(8, 4))
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + "\nnot_a_triton_field: true\n")
    version = upload_and_validate(deployer, model_dir)
    assert version.state == VersionState.FAILED
    assert step(version, "parse")["status"] == "failed"
    assert "not_a_triton_field" in version.validation_error
