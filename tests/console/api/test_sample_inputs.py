"""Sample inputs through the management API: viewers list and read them, deployers upload (a JSON
body, one .json file, or one .npy per input) and delete them; strangers and viewers are refused
every write; a bad or oversize upload is refused with the API's error shape and keeps nothing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from repository.models import Event, SampleInput
from repository.services import api_token_create
from tests.console.api.conftest import assert_error, token_client
from tests.console.views.test_sample_input_pages import CONFIG, ROW
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db

URL = "/api/models/m/versions/1/sample-inputs/"


@pytest.fixture
def version(db):  # type: ignore[no-untyped-def]
    return ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)


def npy_file(array: np.ndarray, name: str = "INPUT0.npy") -> SimpleUploadedFile:  # type: ignore[type-arg]
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return SimpleUploadedFile(name, buffer.getvalue())


def test_a_deployer_keeps_a_json_body_and_npy_files_and_viewers_read_them(
    version, as_deployer, as_viewer
) -> None:  # type: ignore[no-untyped-def]
    kept = as_deployer.post(URL, {"inputs": [ROW]}, format="json")
    assert kept.status_code == 201, kept.json()
    assert kept.json()["shape"] == "INPUT0 FP32[1, 4]" and kept.json()["name"] == "request.json"
    npy = np.arange(8, dtype=np.float32).reshape(2, 4)
    second = as_deployer.post(URL, {"files": [npy_file(npy)]}, format="multipart")
    assert second.status_code == 201, second.json()

    listed = as_viewer.get(URL).json()
    assert [s["shape"] for s in listed] == ["INPUT0 FP32[1, 4]", "INPUT0 FP32[2, 4]"]
    assert listed[1]["inputs"][0]["data"] == list(range(8))
    one = as_viewer.get(f"{URL}{listed[0]['id']}/").json()
    assert one["inputs"] == [ROW] and one["created_by"] == "deployer"
    assert SampleInput.objects.get(pk=one["id"]).version == version


def test_a_deployer_deletes_one_and_every_write_is_audited(version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    sample_id = as_deployer.post(URL, {"inputs": [ROW]}, format="json").json()["id"]
    assert as_deployer.delete(f"{URL}{sample_id}/").status_code == 204
    assert not SampleInput.objects.exists()
    assert_error(as_deployer.delete(f"{URL}{sample_id}/"), 404, "sample_input_not_found")
    actions = list(Event.objects.order_by("pk").values_list("action", flat=True))
    assert actions == ["sample_input_add", "sample_input_delete"]


def test_strangers_and_viewers_cannot_write_and_strangers_cannot_read(
    version, anon, as_viewer, nobody, viewer
) -> None:  # type: ignore[no-untyped-def]
    sample = SampleInput.objects.create(version=version, name="x", inputs=[ROW], size_bytes=1)
    assert anon.get(URL).status_code in (401, 403)
    assert anon.post(URL, {"inputs": [ROW]}, format="json").status_code in (401, 403)
    assert anon.delete(f"{URL}{sample.pk}/").status_code in (401, 403)
    for client in (as_viewer, token_client(viewer, "viewer")):
        assert_error(client.post(URL, {"inputs": [ROW]}, format="json"), 403)
        assert_error(client.delete(f"{URL}{sample.pk}/"), 403)
    # An application's inference key is no key to the management API.
    _, key = api_token_create(user=nobody, role="invoker", models=["m"])
    invoker = APIClient()
    invoker.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert invoker.get(URL).status_code in (401, 403)
    assert list(SampleInput.objects.values_list("pk", flat=True)) == [sample.pk]
    assert not Event.objects.filter(action__startswith="sample_input").exists()


@pytest.mark.parametrize(
    ("body", "fmt", "message"),
    [
        ({"inputs": [{**ROW, "name": "IMAGE"}]}, "json", "not inputs of this model: IMAGE"),
        ({"inputs": [{**ROW, "shape": [1, 5]}]}, "json", "input INPUT0: shape [1, 5]"),
        ({"inputs": "nope"}, "json", "must be a KServe v2 request"),
        ({"files": [SimpleUploadedFile("notes.txt", b"hi")]}, "multipart", "upload one .json"),
        ({}, "multipart", "choose a .json file"),
    ],
)
def test_a_bad_upload_names_what_is_wrong_and_keeps_nothing(
    version, as_deployer, body, fmt, message
) -> None:  # type: ignore[no-untyped-def]
    refused = assert_error(as_deployer.post(URL, body, format=fmt), 400, "invalid_sample_input")
    assert message in refused["message"]
    assert not SampleInput.objects.exists() and not Event.objects.exists()


def test_an_oversize_upload_is_refused_with_413(version, as_deployer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_SAMPLE_INPUT_MAX_BYTES = 64
    big = {"files": [SimpleUploadedFile("r.json", json.dumps({"inputs": [ROW]}).encode())]}
    for body, fmt in (({"inputs": [ROW]}, "json"), (big, "multipart")):
        refused = assert_error(as_deployer.post(URL, body, format=fmt), 413)
        assert refused["code"] == "sample_input_too_large" and "at most 64" in refused["message"]
    assert not SampleInput.objects.exists()


def test_an_unknown_version_is_404(version, as_viewer) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_viewer.get("/api/models/m/versions/9/sample-inputs/"), 404)


def test_schema_lists_the_sample_input_operations(as_viewer) -> None:  # type: ignore[no-untyped-def]
    paths = as_viewer.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    base = "/api/models/{name}/versions/{version}/sample-inputs/"
    assert {"get", "post"} <= set(paths[base])
    assert {"get", "delete"} <= set(paths[f"{base}{{sample_id}}/"])
    assert {"multipart/form-data", "application/json"} <= set(
        paths[base]["post"]["requestBody"]["content"]
    )
