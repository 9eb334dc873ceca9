"""API tokens: the key is shown once and stored as a hash; revoked keys stop working."""

from __future__ import annotations

import hashlib

import pytest

from repository.errors import (
    TokenForAnotherUserError,
    TokenInvalidError,
    TokenOutranksUserError,
    TokenSettingsError,
)
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


def test_invoker_token_names_its_models_and_needs_no_console_role() -> None:
    from tests.factories import UserFactory

    app = UserFactory(username="fraud-app")
    token, key = api_token_create(
        user=app, role="invoker", models=["ranker", "fraud", "fraud"], rate_limit_rps=5,
        max_concurrency=2,
    )  # fmt: skip
    assert (token.model_names, token.rate_limit_rps, token.max_concurrency) == (
        ["fraud", "ranker"], 5, 2)  # fmt: skip
    assert api_token_authenticate(key=key).role == "invoker"


def test_invalid_token_settings_are_all_reported(deployer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TokenSettingsError) as raised:
        api_token_create(user=deployer, role="invoker", expires_days=0, rate_limit_rps=0,
                         max_concurrency=0)  # fmt: skip
    problems = raised.value.extra["problems"]
    assert [p.split(":")[0] for p in problems] == [
        "models", "expires_days", "rate_limit_rps", "max_concurrency"]  # fmt: skip
    with pytest.raises(TokenSettingsError, match="only invoker tokens"):
        api_token_create(user=deployer, role="deployer", models=["fraud"])
    with pytest.raises(TokenSettingsError, match="no '/'"):
        api_token_create(user=deployer, role="invoker", models=["../etc"])
    assert not ApiToken.objects.exists()


def test_tokens_expire_after_90_days_by_default_and_then_are_refused(deployer) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from django.utils import timezone

    token, key = api_token_create(user=deployer, role="viewer")
    left = token.expires_at - timezone.now()
    assert timedelta(days=89, hours=23) < left <= timedelta(days=90)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(TokenInvalidError):
        api_token_authenticate(key=key)


def test_creating_and_revoking_a_token_bump_the_serving_revision(deployer) -> None:  # type: ignore[no-untyped-def]
    from repository.services import serving_revision_current

    before = serving_revision_current()
    token, _ = api_token_create(user=deployer, role="viewer")
    assert serving_revision_current() == before + 1
    api_token_revoke(token=token, actor=deployer)
    api_token_revoke(token=token, actor=deployer)
    assert serving_revision_current() == before + 2


def test_usage_reported_by_serving_only_moves_last_used_forward(deployer) -> None:  # type: ignore[no-untyped-def]
    from datetime import timedelta

    from django.utils import timezone

    from repository.services import api_tokens_mark_used

    token, _ = api_token_create(user=deployer, role="viewer")
    now = timezone.now()
    assert api_tokens_mark_used(used={token.pk: now}) == 1
    assert api_tokens_mark_used(used={token.pk: now - timedelta(minutes=5)}) == 0
    token.refresh_from_db()
    assert token.last_used == now


def test_serving_sees_each_roles_scope(deployer, viewer) -> None:  # type: ignore[no-untyped-def]
    from repository.facade import access_snapshot

    invoker, _ = api_token_create(user=viewer, role="invoker", models=["fraud"])
    every, _ = api_token_create(user=viewer, role="invoker", models=["*"])
    read, _ = api_token_create(user=viewer, role="viewer")
    call, _ = api_token_create(user=deployer, role="deployer")
    revoked, _ = api_token_create(user=deployer, role="viewer")
    api_token_revoke(token=revoked, actor=deployer)
    tokens = {t.token_id: (t.models, t.may_infer) for t in access_snapshot().tokens}
    assert tokens == {
        invoker.pk: (("fraud",), True), every.pk: (None, True), read.pk: (None, False),
        call.pk: (None, True),
    }  # fmt: skip


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


def test_an_admin_may_give_another_user_an_invoker_token_but_a_deployer_may_not(
    registry_admin, deployer
) -> None:  # type: ignore[no-untyped-def]
    from tests.factories import UserFactory

    app = UserFactory(username="fraud-app")
    token, _ = api_token_create(user=app, role="invoker", models=["fraud"], actor=registry_admin)
    assert (token.user, token.role, token.model_names) == (app, "invoker", ["fraud"])
    with pytest.raises(TokenForAnotherUserError) as raised:
        api_token_create(user=app, role="invoker", models=["fraud"], actor=deployer)
    assert raised.value.extra["allowed"] == ["viewer"]
    assert ApiToken.objects.filter(user=app).count() == 1
