"""Golden requests over the API: list, record (202 while recording), get, delete."""

from __future__ import annotations

import pytest

from repository.models import GoldenRequest, VersionState
from repository.services import golden_request_record_run
from tests.console.api.conftest import assert_error
from tests.factories import GoldenRequestFactory, ModelFactory, ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

INPUTS = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]


def test_record_answers_202_recording_then_the_worker_records_it(
    ready_version, as_deployer, as_viewer
) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    body = {"name": "smoke", "inputs": INPUTS, "version": 1, "rtol": 0.01, "atol": 0.0}
    response = as_deployer.post("/api/models/m/golden/", body, format="json")
    assert response.status_code == 202, response.json()
    created = response.json()
    assert (created["name"], created["state"], created["version"]) == ("smoke", "recording", 1)
    assert created["rtol"] == 0.01 and created["inputs"] == INPUTS
    golden_request_record_run(golden_id=created["id"])  # what the worker's task does
    recorded = as_viewer.get(f"/api/models/m/golden/{created['id']}/").json()
    assert recorded["state"] == "recorded"
    assert recorded["expected_outputs"]["OUTPUT0"]["datatype"] == "FP32"


def test_record_defaults_to_the_promoted_version(ready_version, as_deployer) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    as_deployer.post("/api/models/m/versions/1/promote/")
    response = as_deployer.post(
        "/api/models/m/golden/", {"name": "g", "inputs": INPUTS}, format="json"
    )
    assert response.status_code == 202
    assert response.json()["version"] == 1


def test_record_without_version_and_nothing_promoted_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model=ModelFactory(name="m"), number=1)
    response = as_deployer.post(
        "/api/models/m/golden/", {"name": "g", "inputs": INPUTS}, format="json"
    )
    body = assert_error(response, 400, "invalid")
    assert "version" in body["extra"]["fields"]


@pytest.mark.parametrize(
    "payload",
    [
        {"inputs": INPUTS, "version": 1},
        {"name": "g", "inputs": [], "version": 1},
        {"name": "g", "inputs": "nope", "version": 1},
        {"name": "g", "inputs": INPUTS, "version": 1, "rtol": -1},
        {"name": "g", "inputs": [{"name": "INPUT0"}], "version": 1},
    ],
)
def test_bad_golden_requests_are_400(as_deployer, payload) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model=ModelFactory(name="m"), number=1)
    response = as_deployer.post("/api/models/m/golden/", payload, format="json")
    assert_error(response, 400)


def test_record_on_a_failed_version_is_409(as_deployer) -> None:  # type: ignore[no-untyped-def]
    ModelVersionFactory(model=ModelFactory(name="m"), number=1, state=VersionState.FAILED)
    payload = {"name": "g", "inputs": INPUTS, "version": 1}
    response = as_deployer.post("/api/models/m/golden/", payload, format="json")
    assert_error(response, 409, "invalid_state")


def test_duplicate_name_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    ModelVersionFactory(model=model, number=1)
    GoldenRequestFactory(model=model, name="g")
    payload = {"name": "g", "inputs": INPUTS, "version": 1}
    response = as_deployer.post("/api/models/m/golden/", payload, format="json")
    assert_error(response, 400, "invalid_golden_request")


def test_list_and_delete(as_viewer, as_deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    golden = GoldenRequestFactory(model=model, name="a")
    GoldenRequestFactory(model=model, name="b")
    assert [g["name"] for g in as_viewer.get("/api/models/m/golden/").json()] == ["a", "b"]
    assert as_deployer.delete(f"/api/models/m/golden/{golden.pk}/").status_code == 204
    assert list(GoldenRequest.objects.values_list("name", flat=True)) == ["b"]
    assert_error(as_deployer.delete(f"/api/models/m/golden/{golden.pk}/"), 404, "golden_not_found")


def test_golden_of_another_model_is_404(as_viewer) -> None:  # type: ignore[no-untyped-def]
    ModelFactory(name="m")
    other = GoldenRequestFactory(model=ModelFactory(name="other"))
    assert_error(as_viewer.get(f"/api/models/m/golden/{other.pk}/"), 404, "golden_not_found")
