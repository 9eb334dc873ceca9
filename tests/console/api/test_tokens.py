"""API tokens over the API (admin): create shows the key once, list, revoke."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from repository.models import ApiToken
from tests.console.api.conftest import assert_error
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_created_key_works_once_listed_without_key_and_stops_when_revoked(
    as_admin, deployer
) -> None:  # type: ignore[no-untyped-def]
    response = as_admin.post(
        "/api/tokens/", {"name": "ci", "role": "viewer", "user": deployer.username}
    )
    assert response.status_code == 201
    created = response.json()
    key = created["key"]
    assert key.startswith(created["prefix"]) and created["user"] == deployer.username
    assert not ApiToken.objects.filter(key_hash=key).exists()  # only the hash is stored

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/models/").status_code == 200

    listed = as_admin.get("/api/tokens/").json()
    assert [(t["name"], t["role"], t["user"]) for t in listed] == [
        ("ci", "viewer", deployer.username)
    ]
    assert "key" not in listed[0] and listed[0]["last_used"] is not None

    assert as_admin.delete(f"/api/tokens/{created['id']}/").status_code == 204
    assert as_admin.delete(f"/api/tokens/{created['id']}/").status_code == 204  # idempotent
    assert_error(client.get("/api/models/"), 401)
    assert as_admin.get("/api/tokens/").json() == []
    revoked = as_admin.get("/api/tokens/?include_revoked=1").json()
    assert revoked[0]["revoked_at"] is not None


def test_token_defaults_to_the_admin_themself(as_admin, registry_admin) -> None:  # type: ignore[no-untyped-def]
    response = as_admin.post("/api/tokens/", {"role": "admin"})
    assert response.status_code == 201
    assert response.json()["user"] == registry_admin.username


def test_token_cannot_outrank_its_user(as_admin) -> None:  # type: ignore[no-untyped-def]
    UserFactory(username="looker", role="viewer")
    response = as_admin.post("/api/tokens/", {"role": "deployer", "user": "looker"})
    body = assert_error(response, 400, "invalid")
    assert "role" in body["extra"]["fields"]


@pytest.mark.parametrize(
    "payload", [{"role": "wizard"}, {}, {"role": "viewer", "user": "no-such-user"}]
)
def test_bad_token_requests_are_400(as_admin, payload) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_admin.post("/api/tokens/", payload), 400, "invalid")


def test_revoke_of_a_missing_token_is_404(as_admin) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_admin.delete("/api/tokens/999999/"), 404, "not_found")


def test_invoker_token_over_the_api_is_scoped_expiring_and_cannot_manage(as_admin, viewer) -> None:  # type: ignore[no-untyped-def]
    response = as_admin.post(
        "/api/tokens/",
        {"name": "fraud-app", "role": "invoker", "user": viewer.username,
         "models": ["fraud", "ranker"], "expires_days": 30, "rate_limit_rps": 10,
         "max_concurrency": 2},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201
    created = response.json()
    assert created["models"] == ["fraud", "ranker"]
    assert (created["rate_limit_rps"], created["max_concurrency"]) == (10.0, 2)
    assert created["expires_at"] and created["last_used"] is None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created['key']}")
    assert_error(client.get("/api/models/"), 403)


def test_invoker_token_without_models_is_400(as_admin) -> None:  # type: ignore[no-untyped-def]
    response = as_admin.post("/api/tokens/", {"name": "x", "role": "invoker"}, format="json")
    assert response.status_code == 400
    assert "invoker token names its models" in str(response.json())
