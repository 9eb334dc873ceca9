"""The OpenAPI schema and the error shape for requests that match no operation."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.console.api.conftest import assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

CONTRACT_PATHS = [
    "/api/models/",
    "/api/models/{name}/",
    "/api/models/{name}/versions/",
    "/api/models/{name}/versions/{version}/",
    "/api/models/{name}/versions/{version}/promote/",
    "/api/models/{name}/versions/{version}/approve/",
    "/api/models/{name}/rollback/",
    "/api/models/{name}/golden/",
    "/api/models/{name}/golden/{golden_id}/",
    "/api/events/",
    "/api/replicas/",
    "/api/tokens/",
]


def test_schema_generates_and_validates_without_warnings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert "/api/models/{name}/versions/" in out.read_text()


def test_schema_is_served_with_every_contract_path(anon) -> None:  # type: ignore[no-untyped-def]
    response = anon.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    assert set(CONTRACT_PATHS) <= set(schema["paths"])
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_unknown_api_path_is_a_json_404(as_viewer) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_viewer.get("/api/nothing/here/"), 404, "not_found")


def test_wrong_method_is_405(as_viewer) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_viewer.delete("/api/models/"), 405, "method_not_allowed")


def test_malformed_json_is_400(as_deployer) -> None:  # type: ignore[no-untyped-def]
    response = as_deployer.post(
        "/api/models/m/golden/", data="{not json", content_type="application/json"
    )
    assert_error(response, 400, "parse_error")


def test_oversize_form_field_is_413_not_500(as_deployer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = as_deployer.post("/api/models/m/versions/", {"config": "x" * 5000})
    assert_error(response, 413, "request_too_large")


def test_too_many_form_fields_is_400_not_500(as_deployer, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    data = {f"field{i}": "x" for i in range(10)}
    assert_error(as_deployer.post("/api/models/m/versions/", data), 400)


def test_missing_trailing_slash_is_a_404_that_names_the_right_path(deployer) -> None:  # type: ignore[no-untyped-def]
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(deployer)
    body = assert_error(client.post("/api/models/m/rollback"), 404, "not_found")
    assert body["extra"]["did_you_mean"] == "/api/models/m/rollback/"


@pytest.mark.parametrize("url", ["/api/models/m/versions/abc/", "/api/models/m/golden/x/"])
def test_non_numeric_ids_are_json_404(as_viewer, url) -> None:  # type: ignore[no-untyped-def]
    body = assert_error(as_viewer.get(url), 404, "not_found")
    assert "did_you_mean" not in body["extra"]
