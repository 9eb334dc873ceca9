"""Login throttling (django-axes): after the failure limit, that username cannot sign in from
that address, even with the right password, until the cool-off; other addresses still can."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory

PASSWORD = "right-password-1"


@pytest.fixture
def alice(db: Any) -> Any:
    user = UserFactory(username="alice", role="viewer")
    user.set_password(PASSWORD)
    user.save()
    return user


def sign_in(client: Client, password: str, address: str = "10.0.0.1") -> Any:
    return client.post(
        reverse("login"), {"username": "alice", "password": password}, REMOTE_ADDR=address
    )


def test_too_many_failures_lock_the_username_from_that_address(alice: Any, settings: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, "wrong").status_code == 200  # the form again, with its error
    locked = sign_in(client, "wrong")
    assert locked.status_code == 429
    assert "Too many failed sign-ins" in locked.content.decode()
    assert sign_in(client, PASSWORD).status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_same_username_from_another_address_can_still_sign_in(
    alice: Any, settings: Any
) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(), "wrong", address="10.0.0.1")
    elsewhere = Client()
    assert sign_in(elsewhere, PASSWORD, address="10.0.0.2").status_code == 302
    assert elsewhere.session["_auth_user_id"] == str(alice.pk)


def test_a_success_before_the_limit_clears_the_failures(alice: Any, settings: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "wrong")
    assert sign_in(client, PASSWORD).status_code == 302
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(Client(), "wrong").status_code == 200
