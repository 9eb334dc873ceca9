"""The validation pipeline: its own steps (config parse, checksums) and how it stores the check's
report. ``serving.check`` is stood in for by a scripted check here; the real one runs in
tests/repository/test_end_to_end.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from repository.blobs import blob_name, blob_storage
from repository.models import Event, GoldenState, VersionState
from repository.services import model_version_create_from_upload, model_version_validate
from tests.factories import GoldenRequestFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

GOOD_CONFIG = 'name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'


@pytest.fixture(autouse=True)
def fake_check(settings, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTICO_VALIDATION_CHECK_MODULE = "tests.repository.validation.fake_check"
    monkeypatch.setenv("FAKE_CHECK", "ok")


def upload(user, config: str | None = GOOD_CONFIG, content: bytes = b"weights"):  # type: ignore[no-untyped-def]
    return model_version_create_from_upload(
        model_name="m",
        uploaded_by=user,
        file=io.BytesIO(content),
        file_name="model.onnx",
        config_text=config,
    )


def validate(version):  # type: ignore[no-untyped-def]
    model_version_validate(version_id=version.pk)
    version.refresh_from_db()
    return version


def test_passing_check_makes_the_version_ready_with_the_completed_config(deployer) -> None:  # type: ignore[no-untyped-def]
    version = validate(upload(deployer))
    assert version.state == VersionState.READY
    assert [s["name"] for s in version.validation_steps] == [
        "parse",
        "checksums",
        "load",
        "io",
        "verify-config",
    ]
    assert all(s["status"] == "passed" for s in version.validation_steps)
    assert "model.onnx" in version.validation_steps[2]["message"]  # the files were materialised
    assert version.config_text.endswith('backend: "onnxruntime"\n')
    assert version.autocompleted_fields == ["backend"]
    assert version.backend == "onnxruntime"
    assert version.validated_at is not None
    assert Event.objects.filter(action="validated", to_version=version.number).exists()


def test_validation_is_idempotent_on_a_terminal_version(deployer) -> None:  # type: ignore[no-untyped-def]
    version = validate(upload(deployer))
    steps = version.validation_steps
    assert model_version_validate(version_id=version.pk) is None
    version.refresh_from_db()
    assert version.validation_steps == steps
    assert model_version_validate(version_id=999_999) is None  # a missing row is a no-op


def test_unknown_config_field_fails_the_config_step_naming_the_field(deployer) -> None:  # type: ignore[no-untyped-def]
    version = validate(upload(deployer, config=GOOD_CONFIG + "no_such_field: 3\n"))
    assert version.state == VersionState.FAILED
    assert version.validation_steps[0]["name"] == "parse"
    assert version.validation_steps[0]["status"] == "failed"
    assert "no_such_field" in version.validation_steps[0]["message"]
    assert "no_such_field" in version.validation_error
    assert len(version.validation_steps) == 1  # nothing ran after the failed step
    assert version.config_text == ""


def test_config_naming_another_model_fails(deployer) -> None:  # type: ignore[no-untyped-def]
    version = validate(upload(deployer, config='name: "other"\nplatform: "onnxruntime_onnx"\n'))
    assert version.state == VersionState.FAILED
    assert "does not match the model name" in version.validation_error


def test_corrupted_blob_fails_the_checksums_step(deployer) -> None:  # type: ignore[no-untyped-def]
    version = upload(deployer)
    sha = version.files.get().blob_id
    storage = blob_storage()
    storage.delete(blob_name(sha))
    storage.save(blob_name(sha), io.BytesIO(b"tampered"))
    version = validate(version)
    assert version.state == VersionState.FAILED
    assert [s["status"] for s in version.validation_steps] == ["passed", "failed"]
    assert version.validation_steps[1]["name"] == "checksums"
    assert "does not match its checksum" in version.validation_error


def test_failed_check_step_is_named_in_the_report(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_CHECK", "fail-io")
    version = validate(upload(deployer))
    assert version.state == VersionState.FAILED
    assert version.validation_error.startswith("io: input 'INPUT0'")
    assert Event.objects.get(action="validation_failed").detail["error"] == version.validation_error


def test_check_that_crashes_without_a_report_fails_with_its_stderr(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_CHECK", "crash")
    version = validate(upload(deployer))
    assert version.state == VersionState.FAILED
    assert "status 3" in version.validation_error and "boom" in version.validation_error
    assert version.validation_steps[-1]["name"] == "check"


def test_golden_requests_are_replayed_and_a_mismatch_fails(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = validate(upload(deployer))
    golden = GoldenRequestFactory(model=first.model, name="g1", state=GoldenState.RECORDED)
    monkeypatch.setenv("FAKE_CHECK", "golden-mismatch")
    second = validate(upload(deployer, content=b"other weights"))
    assert second.state == VersionState.FAILED
    assert "golden request 'g1'" in second.validation_error
    golden.refresh_from_db()
    assert golden.last_results["version"] == second.number and not golden.last_results["ok"]
