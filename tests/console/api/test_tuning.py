"""The tuning endpoints' contract: who may call what, their errors, and the OpenAPI schema."""

from __future__ import annotations

import pytest

from repository.models import Tuning
from tests.console.api.conftest import assert_error

pytestmark = pytest.mark.django_db

V = "/api/models/m/versions/1/"


def test_viewers_read_jobs_and_deployers_start_them(as_viewer, as_deployer, ready_version) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    assert_error(as_viewer.post(f"{V}tunings/", {"slo_p95_ms": 50}, format="json"), 403)
    assert_error(as_viewer.put("/api/models/m/slo/", {"latency_ms": 50}, format="json"), 403)
    started = as_deployer.post(f"{V}tunings/", {"slo_p95_ms": 50, "rate_per_s": 100}, format="json")
    assert started.status_code == 202, started.json()
    assert started["Location"].endswith(f"{V}tunings/{started.json()['id']}/")
    listed = as_viewer.get(f"{V}tunings/").json()
    assert [
        (j["state"], j["slo"]["latency_ms"], j["slo"]["expected_rate_per_s"]) for j in listed
    ] == [("queued", 50.0, 100.0)]
    assert as_viewer.get(f"{V}tunings/{listed[0]['id']}/").json()["progress"] == 0.0


def test_a_tuning_without_an_slo_and_an_unfinished_apply_are_refused(
    as_deployer, ready_version
) -> None:  # type: ignore[no-untyped-def]
    ready_version("m")
    assert_error(as_deployer.post(f"{V}tunings/", {}, format="json"), 400, "slo_required")
    assert (
        as_deployer.put("/api/models/m/slo/", {"latency_ms": 20}, format="json").status_code == 200
    )
    job_id = as_deployer.post(f"{V}tunings/", {}, format="json").json()["id"]
    assert Tuning.objects.get(pk=job_id).slo["latency_ms"] == 20
    assert_error(as_deployer.post(f"{V}tunings/{job_id}/apply/"), 409, "invalid_job_state")
    assert as_deployer.post(f"{V}tunings/{job_id}/cancel/").json()["state"] == "cancelled"
    assert_error(as_deployer.get(f"{V}tunings/999/"), 404, "job_not_found")


def test_unapproved_code_is_not_load_tested(as_deployer, ready_version) -> None:  # type: ignore[no-untyped-def]
    version = ready_version("m")
    version.needs_approval = True
    version.save()
    body = assert_error(
        as_deployer.post(f"{V}loadtests/", {"concurrency": 2}, format="json"),
        409,
        "load_test_not_allowed",
    )
    assert "approve" in body["message"]


def test_schema_lists_the_tuning_operations(as_viewer) -> None:  # type: ignore[no-untyped-def]
    schema = as_viewer.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    base = "/api/models/{name}/versions/{version}/"
    assert {"get", "post"} <= set(paths[f"{base}loadtests/"])
    assert {"get", "post"} <= set(paths[f"{base}tunings/"])
    assert "get" in paths[f"{base}tunings/{{job_id}}/"]
    assert "post" in paths[f"{base}tunings/{{job_id}}/apply/"]
