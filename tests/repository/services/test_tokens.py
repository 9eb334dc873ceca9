"""API tokens: the key is shown once and stored as a hash; revoked keys stop working."""

from __future__ import annotations

import hashlib

import pytest

from repository.errors import TokenForAnotherUserError, TokenInvalidError, TokenOutranksUserError
from repository.models import ApiToken, Event
from repository.services import api_token_authenticate, api_token_create, api_token_revoke

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_token_is_stored_hashed_and_authenticates(deployer) -> None:  # type: ignore[no-untyped-def]
    token, key = api_token_create(user=deployer, role="deployer", name="ci")
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in {stored.key_hash, stored.prefix, stored.name}
    assert key.startswith(stored.prefix)
    found = api_token_authenticate(key=key)
    assert (found.pk, found.user, found.role) == (token.pk, deployer, "deployer")
    assert found.last_used is not None
    assert Event.objects.filter(action="token_create").exists()


def test_revoked_or_unknown_token_is_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    token, key = api_token_create(user=deployer, role="viewer")
    api_token_revoke(token=token, actor=deployer)
    with pytest.raises(TokenInvalidError):
        api_token_authenticate(key=key)
    with pytest.raises(TokenInvalidError):
        api_token_authenticate(key="not-a-key")


def test_token_of_an_inactive_user_is_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    _, key = api_token_create(user=deployer, role="viewer")
    deployer.is_active = False
    deployer.save()
    with pytest.raises(TokenInvalidError):
        api_token_authenticate(key=key)


def test_unknown_role_is_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        api_token_create(user=deployer, role="root")


def test_token_cannot_carry_more_than_its_users_role(viewer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TokenOutranksUserError) as raised:
        api_token_create(user=viewer, role="deployer")
    assert raised.value.extra == {"user": viewer.username, "held": "viewer", "role": "deployer"}
    assert not ApiToken.objects.exists()


def test_someone_else_may_create_only_a_viewer_token_for_a_user(
    registry_admin, second_admin
) -> None:  # type: ignore[no-untyped-def]
    for role in ("deployer", "admin"):
        with pytest.raises(TokenForAnotherUserError) as raised:
            api_token_create(user=second_admin, role=role, actor=registry_admin)
        assert raised.value.code == "token_for_another_user"
    assert not ApiToken.objects.exists()
    token, _ = api_token_create(user=second_admin, role="viewer", actor=registry_admin)
    assert (token.user, token.role) == (second_admin, "viewer")
    event = Event.objects.get(action="token_create")
    assert (event.actor, event.detail["user"]) == (registry_admin, second_admin.username)


def test_a_user_may_create_a_token_of_their_own_role_for_themself(registry_admin) -> None:  # type: ignore[no-untyped-def]
    token, _ = api_token_create(user=registry_admin, role="admin", actor=registry_admin)
    assert token.role == "admin"
