"""Versions over the API: upload (archive or file + config) → 202, the version JSON contract,
validation through the registry's service, and the error paths."""

from __future__ import annotations

import io
import tarfile

import pytest

from repository.models import Event, ModelVersion
from tests.console.api.conftest import (
    GOOD_CONFIG,
    assert_error,
    model_file,
    validate,
    zip_archive,
)
from tests.factories import ModelFactory, ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONTRACT_KEYS = {"model", "version", "state", "approved", "config", "validation"}
STEP_KEYS = {"name", "status", "message", "duration_ms"}


def test_file_upload_creates_the_model_and_answers_202(upload, deployer) -> None:  # type: ignore[no-untyped-def]
    response = upload("fresh")
    assert response.status_code == 202
    body = response.json()
    assert {k: body[k] for k in ("model", "version", "state")} == {
        "model": "fresh",
        "version": 1,
        "state": "uploaded",
    }
    assert response["Location"].endswith("/api/models/fresh/versions/1/")
    version = ModelVersion.objects.get(model__name="fresh", number=1)
    assert version.uploaded_by == deployer
    assert [f.path for f in version.files.all()] == ["model.onnx"]


def test_second_upload_is_the_next_version(upload) -> None:  # type: ignore[no-untyped-def]
    assert upload("m").json()["version"] == 1
    assert upload("m").json()["version"] == 2


def test_archive_upload_with_numeric_version_folder(as_deployer) -> None:  # type: ignore[no-untyped-def]
    archive = zip_archive(
        {"config.pbtxt": GOOD_CONFIG.format(name="zipped").encode(), "1/model.onnx": b"w"}
    )
    response = as_deployer.post("/api/models/zipped/versions/", {"archive": archive})
    assert response.status_code == 202, response.json()
    version = ModelVersion.objects.get(model__name="zipped")
    assert version.submitted_config_text.startswith('name: "zipped"')


def test_tar_gz_archive_upload(as_deployer) -> None:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("model.onnx")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"w"))
    buf.seek(0)
    buf.name = "m.tar.gz"
    response = as_deployer.post("/api/models/tarred/versions/", {"archive": buf})
    assert response.status_code == 202, response.json()


def test_config_may_be_sent_as_a_file_part(as_deployer) -> None:  # type: ignore[no-untyped-def]
    config = io.BytesIO(GOOD_CONFIG.format(name="cf").encode())
    config.name = "config.pbtxt"
    response = as_deployer.post(
        "/api/models/cf/versions/", {"file": model_file(), "config": config}
    )
    assert response.status_code == 202, response.json()
    version = ModelVersion.objects.get(model__name="cf")
    assert version.submitted_config_text == GOOD_CONFIG.format(name="cf")


def test_upload_then_validation_makes_the_version_ready(upload, as_viewer) -> None:  # type: ignore[no-untyped-def]
    upload("m")
    validate("m", 1)
    body = as_viewer.get("/api/models/m/versions/1/").json()
    assert body["state"] == "ready"
    names = [s["name"] for s in body["validation"]["steps"]]
    # The registry's steps, then the check's, then the worker's own check of the report.
    assert names[-3:] == ["load", "io", "verify-config"] and len(names) > 3
    assert all(set(s) == STEP_KEYS for s in body["validation"]["steps"])
    assert all(s["status"] == "passed" for s in body["validation"]["steps"])
    assert body["config"].startswith('name: "m"')
    assert body["autocompleted_fields"] == ["backend"]


def test_failed_validation_shows_the_failed_step(upload, as_viewer, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_CHECK", "fail-io")
    upload("m")
    assert validate("m", 1).state == "failed"
    body = as_viewer.get("/api/models/m/versions/1/").json()
    failed = [s for s in body["validation"]["steps"] if s["status"] == "failed"]
    assert failed[0]["name"] == "io" and "INPUT0" in failed[0]["message"]
    assert "INPUT0" in body["validation"]["error"]


def test_version_json_has_the_contract_fields(as_viewer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(
        validation_steps=[
            {"name": "config", "status": "passed", "message": "", "duration_ms": 3.5},
            {"name": "load", "status": "running"},  # a step still running lacks fields
        ]
    )
    url = f"/api/models/{version.model.name}/versions/{version.number}/"
    body = as_viewer.get(url).json()
    assert set(body) >= CONTRACT_KEYS
    assert body["model"] == version.model.name
    assert body["version"] == version.number
    assert body["state"] == "ready"
    assert body["approved"] is False
    assert body["config"] == version.config_text
    assert body["validation"]["steps"] == [
        {"name": "config", "status": "passed", "message": "", "duration_ms": 3.5},
        {"name": "load", "status": "running", "message": "", "duration_ms": None},
    ]
    assert body["files"] == []


def test_version_list_newest_first(as_viewer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    for number in (1, 2, 3):
        ModelVersionFactory(model=model, number=number)
    body = as_viewer.get("/api/models/m/versions/").json()
    assert [v["version"] for v in body] == [3, 2, 1]
    assert all(set(v) >= CONTRACT_KEYS for v in body)


@pytest.mark.parametrize(
    "url",
    [
        "/api/models/missing/",
        "/api/models/missing/versions/",
        "/api/models/missing/versions/1/",
        "/api/models/m/versions/9/",
        "/api/models/m/versions/9/promote/",
    ],
)
def test_missing_model_or_version_is_404(as_deployer, url) -> None:  # type: ignore[no-untyped-def]
    ModelFactory(name="m")
    method = as_deployer.post if url.endswith("promote/") else as_deployer.get
    body = assert_error(method(url), 404)
    assert body["code"] in ("model_not_found", "version_not_found")


def test_upload_without_a_file_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    body = assert_error(as_deployer.post("/api/models/m/versions/", {}), 400, "invalid")
    assert "archive" in body["message"]
    assert "archive" in body["extra"]["fields"]


def test_upload_with_both_archive_and_file_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    data = {"file": model_file(), "archive": zip_archive({"model.onnx": b"w"})}
    assert_error(as_deployer.post("/api/models/m/versions/", data), 400, "invalid")


def test_upload_as_json_is_415(as_deployer) -> None:  # type: ignore[no-untyped-def]
    response = as_deployer.post("/api/models/m/versions/", {"file": "x"}, format="json")
    assert_error(response, 415, "unsupported_media_type")


def test_archive_escaping_its_folder_is_rejected_and_leaves_nothing(as_deployer) -> None:  # type: ignore[no-untyped-def]
    archive = zip_archive({"../evil.onnx": b"w"})
    response = as_deployer.post("/api/models/m/versions/", {"archive": archive})
    body = assert_error(response, 400)
    assert body["code"] == "invalid_upload"
    assert not ModelVersion.objects.exists()


def test_unknown_archive_format_is_rejected(as_deployer) -> None:  # type: ignore[no-untyped-def]
    archive = io.BytesIO(b"not an archive at all")
    archive.name = "m.rar"
    assert_error(as_deployer.post("/api/models/m/versions/", {"archive": archive}), 400)


def test_oversize_upload_is_413(as_deployer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_MAX_UPLOAD_BYTES = 10
    response = as_deployer.post("/api/models/m/versions/", {"file": model_file(b"x" * 100)})
    assert_error(response, 413, "upload_too_large")


def test_invalid_model_name_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    response = as_deployer.post("/api/models/.hidden/versions/", {"file": model_file()})
    assert_error(response, 400, "invalid_model_name")


def test_empty_file_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    response = as_deployer.post("/api/models/m/versions/", {"file": model_file(b"")})
    assert_error(response, 400, "invalid")


def test_upload_is_recorded_in_the_audit_log(upload, deployer) -> None:  # type: ignore[no-untyped-def]
    upload("m")
    event = Event.objects.get(action="upload")
    assert (event.model_name, event.to_version, event.actor) == ("m", 1, deployer)


def test_config_change_creates_a_new_version_reusing_files(as_deployer, upload) -> None:  # type: ignore[no-untyped-def]
    upload("m")
    config = GOOD_CONFIG.format(name="m") + "max_batch_size: 0\n"
    response = as_deployer.post(
        "/api/models/m/versions/1/config/", {"config": config}, format="json"
    )
    assert response.status_code == 202, response.json()
    assert response.json()["version"] == 2
    new = ModelVersion.objects.get(model__name="m", number=2)
    assert new.submitted_config_text == config
    assert [f.path for f in new.files.all()] == ["model.onnx"]


def test_config_change_without_config_is_400(as_deployer, upload) -> None:  # type: ignore[no-untyped-def]
    upload("m")
    response = as_deployer.post("/api/models/m/versions/1/config/", {}, format="json")
    assert_error(response, 400, "invalid")


def test_revalidate_sends_a_failed_version_through_validation_again(
    upload, as_deployer, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_CHECK", "fail-io")
    upload("m")
    validate("m", 1)
    response = as_deployer.post("/api/models/m/versions/1/revalidate/")
    assert response.status_code == 202
    assert response.json()["state"] == "uploaded"
    monkeypatch.setenv("FAKE_CHECK", "ok")
    assert validate("m", 1).state == "ready"


def test_revalidate_of_a_ready_version_is_409(as_deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    url = f"/api/models/{version.model.name}/versions/{version.number}/revalidate/"
    assert_error(as_deployer.post(url), 409, "invalid_state")


def test_separate_files_upload_with_relative_paths(as_deployer) -> None:  # type: ignore[no-untyped-def]
    config = io.BytesIO(GOOD_CONFIG.format(name="sep").encode())
    config.name = "config.pbtxt"
    labels = model_file(b"cat\ndog\n", name="labels.txt")
    data = {
        "files": [config, model_file(), labels],
        "paths": ["config.pbtxt", "1/model.onnx", "labels.txt"],
    }
    response = as_deployer.post("/api/models/sep/versions/", data)
    assert response.status_code == 202, response.json()
    version = ModelVersion.objects.get(model__name="sep")
    assert version.submitted_config_text == GOOD_CONFIG.format(name="sep")
    files = {(f.path, f.model_level) for f in version.files.all()}
    assert files == {("model.onnx", False), ("labels.txt", True)}


def test_paths_must_match_files(as_deployer) -> None:  # type: ignore[no-untyped-def]
    data = {"files": [model_file()], "paths": ["1/model.onnx", "extra"]}
    body = assert_error(as_deployer.post("/api/models/m/versions/", data), 400, "invalid")
    assert "paths" in body["extra"]["fields"]


def test_separate_file_path_escaping_the_folder_is_rejected(as_deployer) -> None:  # type: ignore[no-untyped-def]
    data = {"files": [model_file()], "paths": ["../model.onnx"]}
    assert_error(as_deployer.post("/api/models/m/versions/", data), 400, "invalid_upload")
    assert not ModelVersion.objects.exists()
