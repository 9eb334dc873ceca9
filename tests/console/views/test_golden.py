"""Golden requests from the model and version pages: record (validated form), delete."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from repository.models import GoldenRequest
from tests.factories import GoldenRequestFactory

pytestmark = pytest.mark.embedded

INPUTS = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def test_record_stores_the_request_and_starts_recording(deployer_client, catalog):
    url = reverse("console:golden-record", args=["mlp"])
    response = deployer_client.post(
        url,
        {
            "name": "ones",
            "version": 2,
            "inputs": json.dumps(INPUTS),
            "rtol": "1e-5",
            "atol": "1e-6",
        },
        follow=True,
    )
    assert "is being recorded on v2" in response.content.decode()
    golden = GoldenRequest.objects.get(name="ones")
    assert golden.recorded_from == catalog["v2"] and golden.inputs == INPUTS["inputs"]
    assert golden.state == "recording"


def test_record_from_the_version_page_returns_there(deployer_client, catalog):
    back = reverse("console:version-detail", args=["mlp", 3])
    response = deployer_client.post(
        reverse("console:golden-record", args=["mlp"]),
        {
            "name": "x",
            "version": 3,
            "inputs": json.dumps(INPUTS),
            "rtol": "0",
            "atol": "0",
            "next": back,
        },
    )
    assert response["Location"] == back


def test_record_with_bad_json_says_what_is_wrong(deployer_client, catalog):
    response = deployer_client.post(
        reverse("console:golden-record", args=["mlp"]),
        {"name": "bad", "version": 2, "inputs": "{not json", "rtol": "1e-5", "atol": "1e-6"},
        follow=True,
    )
    assert "not valid JSON" in response.content.decode()
    assert not GoldenRequest.objects.exists()


def test_record_on_a_missing_version_is_404(deployer_client, catalog):
    response = deployer_client.post(
        reverse("console:golden-record", args=["mlp"]),
        {"name": "x", "version": 42, "inputs": json.dumps(INPUTS), "rtol": "0", "atol": "0"},
    )
    assert response.status_code == 404


def test_delete_and_list(deployer_client, catalog):
    golden = GoldenRequestFactory(
        model=catalog["mlp"],
        name="keep-me",
        recorded_from=catalog["v2"],
        last_results={"version": 3, "ok": False, "message": "OUTPUT0 differs at [0, 1]"},
    )
    page = deployer_client.get(reverse("console:model-detail", args=["mlp"])).content.decode()
    assert "keep-me" in page and "v3 drifted" in page and "OUTPUT0 differs at [0, 1]" in page
    response = deployer_client.post(
        reverse("console:golden-delete", args=["mlp", golden.pk]), follow=True
    )
    assert "is deleted" in response.content.decode()
    assert not GoldenRequest.objects.exists()
    missing = deployer_client.post(reverse("console:golden-delete", args=["mlp", golden.pk]))
    assert missing.status_code == 404
