"""API tokens: created once in plain text, kept as a sha256 hash, revocable."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from repository.errors import TokenForAnotherUserError, TokenInvalidError, TokenOutranksUserError
from repository.models import ApiToken, Event, Role
from repository.selectors.roles import role_rank, user_role
from repository.services.events import event_record

KEY_PREFIX_CHARS = 8
# Updating last_used on every request would turn each read into a write; once a minute is plenty.
LAST_USED_RESOLUTION = timedelta(seconds=60)
# The roles a token may carry when someone else creates it for a user: only reading.
ROLES_FOR_ANOTHER_USER = frozenset({Role.VIEWER.value})


def api_token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_token_create(
    *, user: Any, role: str, name: str = "", actor: Any = None
) -> tuple[ApiToken, str]:
    """Create a token for ``user`` and return it with its plain key (shown once, never stored).

    The role may not exceed the user's own (TokenOutranksUserError): the token would act with
    the user's role anyway, and a list of tokens should not claim more than they can do. An
    ``actor`` other than ``user`` may only create viewer tokens for them
    (TokenForAnotherUserError): whoever holds a deployer or admin token acts as its user, and
    could approve code in their name. ``actor`` None is the user themself.
    """
    role = Role(role).value
    held = user_role(user)
    if held is None or role_rank(held) < role_rank(role):
        raise TokenOutranksUserError(user.get_username(), held, role)
    _require_own_or_viewer(actor=actor, user=user, role=role)
    key = secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            role=role,
            key_hash=api_token_hash(key),
            prefix=key[:KEY_PREFIX_CHARS],
        )
        event_record(
            actor=actor if actor is not None else user,
            action=Event.Action.TOKEN_CREATE,
            detail={"token": token.prefix, "user": user.get_username(), "role": role},
        )
    return token, key


def _require_own_or_viewer(*, actor: Any, user: Any, role: str) -> None:
    if actor is None or actor.pk == user.pk or role in ROLES_FOR_ANOTHER_USER:
        return
    raise TokenForAnotherUserError(
        actor.get_username(), user.get_username(), role, sorted(ROLES_FOR_ANOTHER_USER)
    )


def api_token_revoke(*, token: ApiToken, actor: Any) -> ApiToken:
    """Revoke a token (idempotent)."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            event_record(
                actor=actor,
                action=Event.Action.TOKEN_REVOKE,
                detail={"token": token.prefix, "user": token.user.get_username()},
            )
    return token


def api_token_authenticate(*, key: str) -> ApiToken:
    """The live token for ``key`` (its user selected) or TokenInvalidError."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=api_token_hash(key or ""), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        raise TokenInvalidError()
    now = timezone.now()
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now
    return token
