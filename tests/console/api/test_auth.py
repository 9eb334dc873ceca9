"""Authentication (session with CSRF, API tokens) and role checks on every kind of endpoint."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from repository.services import api_token_create, api_token_revoke
from tests.console.api.conftest import assert_error, signed_in, token_client
from tests.factories import ModelFactory, ModelVersionFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

READ_URLS = ["/api/models/", "/api/events/", "/api/replicas/"]


@pytest.mark.parametrize("url", READ_URLS)
def test_unauthenticated_request_gets_401_json_with_token_challenge(anon, url) -> None:  # type: ignore[no-untyped-def]
    response = anon.get(url)
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("post", "/api/models/m/versions/"),
        ("post", "/api/models/m/versions/1/promote/"),
        ("post", "/api/models/m/rollback/"),
        ("post", "/api/tokens/"),
        ("delete", "/api/models/m/golden/1/"),
    ],
)
def test_unauthenticated_mutation_gets_401(anon, method, url) -> None:  # type: ignore[no-untyped-def]
    assert_error(getattr(anon, method)(url), 401, "not_authenticated")


def test_token_authenticates_and_records_last_use(viewer) -> None:  # type: ignore[no-untyped-def]
    token, key = api_token_create(user=viewer, role="viewer", name="ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/models/").status_code == 200
    token.refresh_from_db()
    assert token.last_used is not None


def test_bearer_keyword_is_accepted_too(viewer) -> None:  # type: ignore[no-untyped-def]
    _, key = api_token_create(user=viewer, role="viewer")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/models/").status_code == 200


@pytest.mark.parametrize("header", ["Token nope", "Token a b", "Token"])
def test_bad_token_header_is_401(header) -> None:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    assert_error(client.get("/api/models/"), 401, "authentication_failed")


def test_revoked_token_is_refused(viewer, registry_admin) -> None:  # type: ignore[no-untyped-def]
    token, key = api_token_create(user=viewer, role="viewer")
    api_token_revoke(token=token, actor=registry_admin)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert_error(client.get("/api/models/"), 401, "authentication_failed")


def test_token_of_an_inactive_user_is_refused(viewer) -> None:  # type: ignore[no-untyped-def]
    client = token_client(viewer, "viewer")
    viewer.is_active = False
    viewer.save()
    assert_error(client.get("/api/models/"), 401)


def test_token_role_caps_the_users_role(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    client = token_client(deployer, "viewer")
    url = f"/api/models/{version.model.name}/versions/{version.number}/promote/"
    body = assert_error(client.post(url), 403, "permission_denied")
    assert "deployer" in body["message"]
    assert token_client(deployer, "deployer").post(url).status_code == 200


def test_user_without_a_role_cannot_read(nobody) -> None:  # type: ignore[no-untyped-def]
    assert_error(signed_in(nobody).get("/api/models/"), 403, "permission_denied")


def test_superuser_acts_as_admin() -> None:
    root = UserFactory(username="root", is_superuser=True, is_staff=True)
    assert signed_in(root).get("/api/tokens/").status_code == 200


def test_session_mutation_without_csrf_token_is_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(deployer)
    url = f"/api/models/{version.model.name}/versions/{version.number}/promote/"
    body = assert_error(client.post(url), 403, "permission_denied")
    assert "CSRF" in body["message"]


def test_session_mutation_with_csrf_token_is_accepted(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory()
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(deployer)
    secret = "a" * 32  # what a browser echoes from the csrftoken cookie
    client.cookies["csrftoken"] = secret
    url = f"/api/models/{version.model.name}/versions/{version.number}/promote/"
    assert client.post(url, HTTP_X_CSRFTOKEN=secret).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [
        ("post", "versions/", "deployer"),
        ("post", "versions/{v}/promote/", "deployer"),
        ("post", "versions/{v}/approve/", "admin"),
        ("post", "versions/{v}/revalidate/", "deployer"),
        ("post", "versions/{v}/config/", "deployer"),
        ("post", "rollback/", "deployer"),
        ("post", "golden/", "deployer"),
        ("delete", "golden/1/", "deployer"),
    ],
)
def test_viewer_gets_403_on_every_model_mutation(as_viewer, method, path, role) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    ModelVersionFactory(model=model, number=1)
    url = "/api/models/m/" + path.format(v=1)
    body = assert_error(getattr(as_viewer, method)(url, {}), 403, "permission_denied")
    assert role in body["message"]


@pytest.mark.parametrize(
    ("method", "url"),
    [("get", "/api/tokens/"), ("post", "/api/tokens/"), ("delete", "/api/tokens/1/")],
)
def test_deployer_gets_403_on_token_management(as_deployer, method, url) -> None:  # type: ignore[no-untyped-def]
    assert_error(getattr(as_deployer, method)(url), 403, "permission_denied")
