"""The validation pipeline: its own steps (config parse, checksums) and how it stores the check's
report. ``serving.check`` is stood in for by a scripted check here; the real one runs in
tests/repository/test_end_to_end.py."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from repository.blobs import blob_name, blob_storage
from repository.models import Event, GoldenState, ModelVersion, VersionState
from repository.services import (
    event_record,
    model_version_create_from_upload,
    model_version_validate,
)
from repository.validation.pipeline import MAX_ABANDONED_RUNS
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


FORGED_CONFIGS = {
    "another model's name": ('name: "other"\nplatform: "onnxruntime_onnx"\n', "not the model's"),
    "a changed platform": (
        'name: "m"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n',
        "differs from the uploaded config's 'onnxruntime_onnx'",
    ),
    "no config": ("", "returned none"),
    "unparseable text": ("name: {{", "failed to read text proto"),
    "an invalid config": ('name: "m"\nplatform: "onnxruntime_onnx"\nmax_batch_size: -4\n', "max"),
}


@pytest.mark.parametrize("forged", FORGED_CONFIGS, ids=list(FORGED_CONFIGS))
def test_a_forged_effective_config_is_rechecked_and_never_stored(  # type: ignore[no-untyped-def]
    deployer, monkeypatch, forged: str
) -> None:
    text, reason = FORGED_CONFIGS[forged]
    monkeypatch.setenv("FAKE_CHECK_CONFIG", text)
    version = validate(upload(deployer))
    assert version.state == VersionState.FAILED
    assert version.validation_steps[-1]["name"] == "verify-config"
    assert reason in version.validation_error
    assert version.config_text == "" and version.backend == ""


def test_the_stored_config_is_the_one_the_worker_printed(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(
        "FAKE_CHECK_CONFIG", 'name:   "m"   platform: "onnxruntime_onnx"  # a comment\n'
    )
    version = validate(upload(deployer))
    assert version.state == VersionState.READY, version.validation_error
    assert version.config_text == 'name: "m"\nplatform: "onnxruntime_onnx"\n'


def test_golden_outputs_are_judged_by_the_worker_not_the_check(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = validate(upload(deployer))
    expected = {"OUTPUT0": {"datatype": "FP32", "shape": [1], "data": [2.0]}}
    GoldenRequestFactory(
        model=first.model, name="g1", state=GoldenState.RECORDED, expected_outputs=expected
    )
    # The check says every golden request passed, and answers [1.0]; the recording says [2.0].
    second = validate(upload(deployer, content=b"other weights"))
    assert second.state == VersionState.FAILED
    assert second.validation_steps[-1]["name"] == "verify-golden"
    assert "golden request 'g1'" in second.validation_error
    assert "max abs difference 1" in second.validation_error


def test_the_check_is_never_told_the_expected_outputs(deployer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first = validate(upload(deployer))
    expected = {"OUTPUT0": {"datatype": "FP32", "shape": [1], "data": [2.0]}}
    GoldenRequestFactory(
        model=first.model, name="g1", state=GoldenState.RECORDED, expected_outputs=expected
    )
    monkeypatch.setenv("FAKE_CHECK", "golden-peek")  # would echo them, were it given them
    second = validate(upload(deployer, content=b"other weights"))
    assert second.state == VersionState.FAILED
    assert "golden request 'g1'" in second.validation_error


def test_a_missing_sandbox_fails_the_version_saying_how_to_fix_it(  # type: ignore[no-untyped-def]
    deployer, settings, tmp_path: Path
) -> None:
    settings.PORTICO_VALIDATION_BWRAP_PATH = str(tmp_path / "bwrap")
    version = validate(upload(deployer))
    assert version.state == VersionState.FAILED
    assert version.validation_steps[-1]["name"] == "sandbox"
    assert "validation sandbox is unavailable" in version.validation_error
    assert "install bubblewrap" in version.validation_error.lower()


def test_a_run_with_the_sandbox_switched_off_is_on_the_audit_log(deployer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_VALIDATION_SANDBOX = "off"
    version = validate(upload(deployer))
    assert version.state == VersionState.READY, version.validation_error
    started = Event.objects.get(action="validation_started", to_version=version.number)
    assert started.detail["sandbox"] == "off"
    settings.PORTICO_VALIDATION_SANDBOX = "bwrap"
    again = validate(upload(deployer, content=b"v2"))
    assert Event.objects.get(action="validation_started", to_version=again.number).detail == {}


def abandoned(version, runs: int):  # type: ignore[no-untyped-def]
    """``version`` as ``runs`` workers that died mid-validation left it (the last long ago)."""
    for _ in range(runs):
        event_record(actor=None, action=Event.Action.VALIDATION_STARTED, model=version.model,
                     to_version=version.number)  # fmt: skip
    ModelVersion.objects.filter(pk=version.pk).update(
        state=VersionState.VALIDATING, validation_started_at=timezone.now() - timedelta(hours=1)
    )
    return version


def test_a_version_abandoned_by_its_worker_three_times_fails_with_the_reason(deployer) -> None:  # type: ignore[no-untyped-def]
    version = validate(abandoned(upload(deployer), MAX_ABANDONED_RUNS))
    assert version.state == VersionState.FAILED
    assert "abandoned 3 times" in version.validation_error
    assert Event.objects.filter(action="validation_failed", to_version=version.number).exists()


def test_one_abandoned_run_is_simply_run_again(deployer) -> None:  # type: ignore[no-untyped-def]
    assert validate(abandoned(upload(deployer), 1)).state == VersionState.READY
