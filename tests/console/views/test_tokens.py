"""API tokens page: the key is shown once, the list never shows it, revoke is idempotent."""

from __future__ import annotations

import pytest
from django.urls import reverse

from repository.models import ApiToken, Event
from repository.services import api_token_authenticate

pytestmark = pytest.mark.embedded


def test_create_shows_the_key_once(admin_client, admin_user):
    url = reverse("console:token-list")
    response = admin_client.post(url, {"name": "ci", "role": "deployer", "username": ""})
    body = response.content.decode()
    assert "shown only this once" in body
    token = ApiToken.objects.get(name="ci")
    key = body.split('<pre id="new-token-key">')[1].split("</pre>")[0]
    assert api_token_authenticate(key=key).pk == token.pk
    assert token.user == admin_user and token.role == "deployer"
    again = admin_client.get(url).content.decode()
    assert key not in again and token.prefix in again


def test_create_for_another_user_and_unknown_user(admin_client, viewer):
    url = reverse("console:token-list")
    admin_client.post(url, {"name": "v", "role": "viewer", "username": "viewer"})
    assert ApiToken.objects.get(name="v").user == viewer
    response = admin_client.post(url, {"name": "x", "role": "viewer", "username": "ghost"})
    assert response.status_code == 400
    assert "There is no user named" in response.content.decode()


def test_revoke_twice_records_one_event(admin_client, admin_user):
    admin_client.post(reverse("console:token-list"), {"name": "ci", "role": "viewer"})
    token = ApiToken.objects.get(name="ci")
    url = reverse("console:token-revoke", args=[token.pk])
    response = admin_client.post(url, follow=True)
    assert "is revoked" in response.content.decode()
    admin_client.post(url)
    token.refresh_from_db()
    assert token.revoked
    assert Event.objects.filter(action="token_revoke").count() == 1


def test_revoke_unknown_token_is_404(admin_client):
    assert admin_client.post(reverse("console:token-revoke", args=[12345])).status_code == 404


def test_tokens_page_empty_state(admin_client):
    assert "No API tokens yet." in admin_client.get(reverse("console:token-list")).content.decode()


def test_page_refuses_a_token_above_its_users_role(admin_client, viewer):
    url = reverse("console:token-list")
    response = admin_client.post(url, {"name": "big", "role": "admin", "username": "viewer"})
    assert response.status_code == 400
    assert "a token cannot carry more" in response.content.decode()
    assert not ApiToken.objects.filter(name="big").exists()


def test_page_creates_an_invoker_token_and_lists_scope_expiry_and_last_use(admin_client, viewer):
    url = reverse("console:token-list")
    response = admin_client.post(
        url, {"name": "app", "role": "invoker", "username": "viewer", "models": "fraud, ranker",
              "expires_days": "7", "rate_limit_rps": "5", "max_concurrency": "2"},
    )  # fmt: skip
    assert response.status_code == 200
    token = ApiToken.objects.get(name="app")
    assert (token.role, token.model_names, token.max_concurrency) == (
        "invoker", ["fraud", "ranker"], 2)  # fmt: skip
    page = admin_client.get(url).content.decode()
    assert "fraud, ranker" in page and "5.0/s, 2 at once" in page
    assert token.expires_at.strftime("%Y-%m-%d") in page
    assert 'class="token-last-used">never' in page


def test_page_refuses_an_admin_token_for_another_admin(admin_client, registry_admin):
    url = reverse("console:token-list")
    response = admin_client.post(
        url, {"name": "as-them", "role": "admin", "username": "registry-admin"}
    )
    assert response.status_code == 400
    assert "only with the role invoker or viewer, not admin" in response.content.decode()
    assert not ApiToken.objects.filter(name="as-them").exists()
