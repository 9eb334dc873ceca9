"""Chunked, resumable uploads: offsets, resume after a drop, assembly into a registry version."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from django.urls import reverse

from repository.demo_models import write_onnx_identity
from repository.models import ModelVersion
from tests.console.views.conftest import signed_in

pytestmark = pytest.mark.embedded


def open_session(client, path: str, size: int) -> dict:
    response = client.post(
        reverse("console:upload-session-create"),
        data={"path": path, "size": size},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def put_chunk(client, session_id: str, offset: int, data: bytes):
    return client.put(
        reverse("console:upload-session-detail", args=[session_id]),
        data=data,
        content_type="application/octet-stream",
        HTTP_UPLOAD_OFFSET=str(offset),
    )


def upload(client, path: str, data: bytes, chunk: int = 1000) -> str:
    session = open_session(client, path, len(data))
    for offset in range(0, len(data), chunk):
        assert (
            put_chunk(client, session["id"], offset, data[offset : offset + chunk]).status_code
            == 200
        )
    return session["id"]


@pytest.fixture
def onnx_bytes(model_repo: Path) -> bytes:
    return (write_onnx_identity(model_repo, "ident") / "1" / "model.onnx").read_bytes()


def test_chunks_must_come_at_the_received_offset(deployer_client):
    session = open_session(deployer_client, "model.onnx", 10)
    assert put_chunk(deployer_client, session["id"], 0, b"01234").json()["offset"] == 5
    wrong = put_chunk(deployer_client, session["id"], 0, b"01234")  # a retried chunk
    assert wrong.status_code == 409 and wrong.json()["offset"] == 5
    gap = put_chunk(deployer_client, session["id"], 8, b"89")
    assert gap.status_code == 409 and gap.json()["offset"] == 5
    status = deployer_client.get(reverse("console:upload-session-detail", args=[session["id"]]))
    assert status.json() == {**session, "offset": 5, "complete": False}
    done = put_chunk(deployer_client, session["id"], 5, b"56789").json()
    assert done["offset"] == 10 and done["complete"]


def test_chunk_past_the_declared_size_is_refused_whole(deployer_client):
    session = open_session(deployer_client, "model.onnx", 4)
    response = put_chunk(deployer_client, session["id"], 0, b"too long")
    assert response.status_code == 400
    status = deployer_client.get(reverse("console:upload-session-detail", args=[session["id"]]))
    assert status.json()["offset"] == 0


def test_paths_that_escape_the_upload_are_refused(deployer_client):
    for path in ("../evil.py", "/etc/passwd", "a/../../b"):
        response = deployer_client.post(
            reverse("console:upload-session-create"),
            data={"path": path, "size": 1},
            content_type="application/json",
        )
        assert response.status_code == 400, path


def test_oversize_upload_is_refused_up_front(deployer_client, settings):
    settings.PORTICO_MAX_UPLOAD_BYTES = 100
    response = deployer_client.post(
        reverse("console:upload-session-create"),
        data={"path": "m.onnx", "size": 101},
        content_type="application/json",
    )
    assert response.status_code == 413 and "limited to 100 bytes" in response.json()["message"]


def test_another_users_session_is_not_found(deployer_client, admin_user):
    session = open_session(deployer_client, "model.onnx", 4)
    other = signed_in(admin_user)
    url = reverse("console:upload-session-detail", args=[session["id"]])
    assert other.get(url).status_code == 404
    assert put_chunk(other, session["id"], 0, b"abcd").status_code == 404


def test_finish_registers_a_single_onnx_file_as_a_version(deployer_client, onnx_bytes):
    session_id = upload(deployer_client, "model.onnx", onnx_bytes)
    response = deployer_client.post(
        reverse("console:upload-finish"),
        content_type="application/json",
        data={"model": "ident", "sessions": [session_id], "config": ""},
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["model"] == "ident" and data["version"] == 1 and data["state"] == "uploaded"
    assert data["url"] == reverse("console:version-detail", args=["ident", 1])
    version = ModelVersion.objects.get(pk=data["version_id"])
    assert [f.path for f in version.files.all()] == ["model.onnx"]
    assert version.size == len(onnx_bytes)
    # The same files cannot be submitted twice (a double click makes one version).
    again = deployer_client.post(
        reverse("console:upload-finish"),
        content_type="application/json",
        data={"model": "ident", "sessions": [session_id]},
    )
    assert again.status_code == 404
    assert ModelVersion.objects.count() == 1


def test_finish_with_a_zipped_triton_folder_and_config(deployer_client, model_repo):
    folder = write_onnx_identity(model_repo, "zipped")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    session_id = upload(deployer_client, "zipped.zip", buffer.getvalue(), chunk=4096)
    response = deployer_client.post(
        reverse("console:upload-finish"),
        content_type="application/json",
        data={"model": "zipped", "sessions": [session_id]},
    )
    assert response.status_code == 201, response.content
    version = ModelVersion.objects.get(pk=response.json()["version_id"])
    assert "model.onnx" in [f.path for f in version.files.all()]
    assert 'name: "zipped"' in version.submitted_config_text


def test_finish_with_several_files(deployer_client, model_repo):
    folder = write_onnx_identity(model_repo, "several")
    ids = [
        upload(deployer_client, "1/model.onnx", (folder / "1" / "model.onnx").read_bytes()),
        upload(deployer_client, "config.pbtxt", (folder / "config.pbtxt").read_bytes()),
    ]
    response = deployer_client.post(
        reverse("console:upload-finish"),
        content_type="application/json",
        data={"model": "several", "sessions": ids},
    )
    assert response.status_code == 201, response.content


def test_finish_refuses_incomplete_files_and_bad_names(deployer_client, onnx_bytes):
    session = open_session(deployer_client, "model.onnx", len(onnx_bytes))
    put_chunk(deployer_client, session["id"], 0, onnx_bytes[:10])
    url = reverse("console:upload-finish")
    response = deployer_client.post(
        url, content_type="application/json", data={"model": "ident", "sessions": [session["id"]]}
    )
    assert response.status_code == 409 and "not fully uploaded" in response.json()["message"]
    put_chunk(deployer_client, session["id"], 10, onnx_bytes[10:])
    response = deployer_client.post(
        url, content_type="application/json", data={"model": "../bad", "sessions": [session["id"]]}
    )
    assert response.status_code == 400 and "not a valid model name" in response.json()["message"]
    # The files survive a refused submit, so fixing the name is enough.
    response = deployer_client.post(
        url, content_type="application/json", data={"model": "ident", "sessions": [session["id"]]}
    )
    assert response.status_code == 201
    empty = deployer_client.post(url, content_type="application/json", data={"model": "x"})
    assert empty.status_code == 400 and "at least one file" in empty.json()["message"]


def test_config_suggestion_for_a_single_onnx_file(deployer_client, onnx_bytes):
    session_id = upload(deployer_client, "model.onnx", onnx_bytes)
    response = deployer_client.post(
        reverse("console:upload-config"),
        content_type="application/json",
        data={"model": "ident", "sessions": [session_id]},
    )
    assert response.status_code == 200
    data = response.json()
    assert 'name: "INPUT0"' in data["config"] and "dynamic_batching" in data["config"]
    assert "input" in data["autocompleted_fields"]
    # No device is chosen for the user: the replica that loads the version places it.
    assert "KIND_CPU" not in data["config"] and "count:" not in data["config"]


def test_upload_page_renders_for_deployers(deployer_client):
    body = deployer_client.get(reverse("console:upload") + "?model=abc").content.decode()
    assert 'id="dropzone"' in body and 'value="abc"' in body
