"""Every page and action checks the role on the server: sign-in redirect, 403s, and 404s."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.console.views.conftest import signed_in

pytestmark = pytest.mark.embedded

VIEWER_PAGES = [
    ("console:model-list", []),
    ("console:model-detail", ["mlp"]),
    ("console:model-serving", ["mlp"]),
    ("console:version-detail", ["mlp", 3]),
    ("console:event-list", []),
    ("console:replica-list", []),
]
DEPLOYER_GETS = [
    ("console:upload", []),
    ("console:version-promote", ["mlp", 3]),
    ("console:model-rollback", ["mlp"]),
]
DEPLOYER_POSTS = [
    ("console:version-promote", ["mlp", 3]),
    ("console:model-rollback", ["mlp"]),
    ("console:golden-record", ["mlp"]),
    ("console:golden-delete", ["mlp", 1]),
    ("console:upload-session-create", []),
    ("console:upload-finish", []),
    ("console:upload-config", []),
]
ADMIN_PAGES = [("console:token-list", []), ("console:version-approve", ["pyfn", 1])]


@pytest.mark.parametrize(("name", "args"), VIEWER_PAGES + DEPLOYER_GETS + ADMIN_PAGES)
def test_anonymous_users_are_sent_to_sign_in(client, catalog, name, args):
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


@pytest.mark.parametrize(("name", "args"), VIEWER_PAGES)
def test_viewer_can_read_every_page(viewer_client, catalog, name, args):
    assert viewer_client.get(reverse(name, args=args)).status_code == 200


@pytest.mark.parametrize(("name", "args"), VIEWER_PAGES)
def test_user_without_a_role_gets_403(roleless, catalog, name, args):
    response = signed_in(roleless).get(reverse(name, args=args))
    assert response.status_code == 403
    assert b"viewer role" in response.content


@pytest.mark.parametrize(("name", "args"), DEPLOYER_GETS + ADMIN_PAGES)
def test_viewer_gets_403_on_deployer_and_admin_pages(viewer_client, catalog, name, args):
    assert viewer_client.get(reverse(name, args=args)).status_code == 403


@pytest.mark.parametrize(("name", "args"), DEPLOYER_POSTS)
def test_viewer_gets_403_on_every_action(viewer_client, catalog, name, args):
    response = viewer_client.post(
        reverse(name, args=args), content_type="application/json", data={}
    )
    assert response.status_code == 403
    catalog["v2"].refresh_from_db()
    assert catalog["v2"].state == "promoted"


@pytest.mark.parametrize(("name", "args"), ADMIN_PAGES)
def test_deployer_gets_403_on_admin_pages(deployer_client, catalog, name, args):
    assert deployer_client.get(reverse(name, args=args)).status_code == 403
    assert deployer_client.post(reverse(name, args=args)).status_code == 403


def test_viewer_does_not_see_actions(viewer_client, catalog):
    body = viewer_client.get(reverse("console:model-detail", args=["mlp"])).content.decode()
    assert 'data-action="promote"' not in body
    assert 'data-action="rollback"' not in body
    assert "Upload a new version" not in body
    assert "Record a golden request" not in body
    assert "API tokens" not in body


def test_deployer_sees_promote_and_rollback_but_not_approve(deployer_client, catalog):
    body = deployer_client.get(reverse("console:model-detail", args=["mlp"])).content.decode()
    assert 'data-action="promote"' in body
    assert "Roll back to v1" in body
    pyfn = deployer_client.get(reverse("console:model-detail", args=["pyfn"])).content.decode()
    assert 'data-action="approve"' not in pyfn
    assert 'data-action="promote"' not in pyfn  # not approved yet
    assert "needs approval" in pyfn


def test_admin_sees_approve_for_someone_elses_code(admin_client, catalog):
    body = admin_client.get(reverse("console:model-detail", args=["pyfn"])).content.decode()
    assert 'data-action="approve"' in body


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("console:model-detail", ["nope"]),
        ("console:model-serving", ["nope"]),
        ("console:version-detail", ["mlp", 99]),
        ("console:version-detail", ["nope", 1]),
        ("console:version-promote", ["mlp", 99]),
        ("console:model-rollback", ["nope"]),
        ("console:version-progress", [999999]),
    ],
)
def test_missing_things_are_404_with_a_message(deployer_client, catalog, name, args):
    response = deployer_client.get(reverse(name, args=args))
    assert response.status_code == 404


def test_404_page_names_what_is_missing(viewer_client, catalog, settings):
    settings.DEBUG = False
    response = viewer_client.get(reverse("console:version-detail", args=["mlp", 99]))
    assert b"has no version 99" in response.content


def test_sign_in_and_out(client, viewer, catalog):
    response = client.post(reverse("login"), {"username": "viewer", "password": "password"})
    assert response.status_code == 302
    assert client.get(reverse("console:model-list")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("console:model-list")).status_code == 302


def test_wrong_password_says_so(client, viewer):
    response = client.post(reverse("login"), {"username": "viewer", "password": "wrong"})
    assert response.status_code == 200
    assert b"didn&#x27;t match" in response.content or b"didn't match" in response.content
