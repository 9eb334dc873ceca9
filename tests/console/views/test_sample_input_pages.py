"""Sample inputs on the load-test page: deployers upload and delete them (checked against the
version's config, recorded in the audit log); viewers see them but are refused both actions."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from repository.models import Event, SampleInput
from tests.factories import ModelVersionFactory

pytestmark = pytest.mark.django_db

CONFIG = """name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }
"""
PAGE = "/models/m/versions/1/tuning/"
UPLOAD = "/models/m/versions/1/sample-inputs/"
ROW = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0.5, 1.5, 2.5, 3.5]}


def json_file(inputs: list[dict[str, object]], name: str = "req.json") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, json.dumps({"inputs": inputs}).encode(), "application/json")


def test_a_deployer_uploads_json_and_npy_sees_them_listed_and_deletes_one(
    deployer_client,
) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    response = deployer_client.post(UPLOAD, {"files": json_file([ROW])}, follow=True)
    assert "Sample input “req.json” (INPUT0 FP32[1, 4]) is kept" in response.content.decode()
    buffer = io.BytesIO()
    np.save(buffer, np.ones((2, 4), dtype=np.float32))
    deployer_client.post(UPLOAD, {"files": SimpleUploadedFile("INPUT0.npy", buffer.getvalue())})
    page = deployer_client.get(PAGE).content.decode()
    assert 'id="sample-input-form"' in page
    assert "INPUT0 FP32[1, 4]" in page and "INPUT0 FP32[2, 4]" in page
    first, second = SampleInput.objects.order_by("pk")
    assert second.inputs[0]["data"] == [1.0] * 8

    deployer_client.post(f"{UPLOAD}{first.pk}/delete/")
    assert list(SampleInput.objects.values_list("pk", flat=True)) == [second.pk]
    actions = list(Event.objects.order_by("pk").values_list("action", flat=True))
    assert actions == ["sample_input_add", "sample_input_add", "sample_input_delete"]


@pytest.mark.parametrize(
    ("upload", "message"),
    [
        (json_file([{**ROW, "name": "IMAGE"}]), "not inputs of this model: IMAGE"),
        (json_file([{**ROW, "shape": [1, 5]}]), "input INPUT0: shape [1, 5], the model takes dims"),
        (SimpleUploadedFile("notes.txt", b"hello"), "upload one .json file"),
    ],
)
def test_an_upload_that_does_not_fit_shows_why_and_keeps_nothing(
    deployer_client, upload, message
) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    page = deployer_client.post(UPLOAD, {"files": upload}, follow=True).content.decode()
    assert message in page.replace("&#x27;", "'")
    assert not SampleInput.objects.exists() and not Event.objects.exists()


@override_settings(PORTICO_SAMPLE_INPUT_MAX_BYTES=64)
def test_an_upload_over_the_size_cap_is_refused(deployer_client) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    page = deployer_client.post(UPLOAD, {"files": json_file([ROW])}, follow=True).content.decode()
    assert "Sample inputs may hold at most 64 bytes per upload." in page
    assert not SampleInput.objects.exists()


def test_a_viewer_sees_the_list_but_may_neither_upload_nor_delete(
    deployer_client, viewer_client
) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    deployer_client.post(UPLOAD, {"files": json_file([ROW])})
    sample = SampleInput.objects.get()
    page = viewer_client.get(PAGE).content.decode()
    assert "INPUT0 FP32[1, 4]" in page
    assert 'id="sample-input-form"' not in page and "sample-inputs/" not in page

    assert viewer_client.post(UPLOAD, {"files": json_file([ROW])}).status_code == 403
    assert viewer_client.post(f"{UPLOAD}{sample.pk}/delete/").status_code == 403
    assert SampleInput.objects.count() == 1


def test_a_sample_of_another_version_cannot_be_deleted_through_this_one(
    deployer_client,
) -> None:  # type: ignore[no-untyped-def]
    v1 = ModelVersionFactory(model__name="m", number=1, config_text=CONFIG)
    ModelVersionFactory(model=v1.model, number=2, config_text=CONFIG)
    deployer_client.post("/models/m/versions/2/sample-inputs/", {"files": json_file([ROW])})
    other = SampleInput.objects.get()
    assert deployer_client.post(f"{UPLOAD}{other.pk}/delete/").status_code == 404
    assert SampleInput.objects.filter(pk=other.pk).exists()
