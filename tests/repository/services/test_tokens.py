"""API tokens: the key is shown once and stored as a hash; revoked keys stop working."""

from __future__ import annotations

import hashlib

import pytest

from repository.errors import TokenInvalidError, TokenOutranksUserError
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
