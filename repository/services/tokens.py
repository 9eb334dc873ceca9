"""API tokens: created once in plain text, kept as a sha256 hash, revocable, expiring.

Keys are 256 random bits, so an unsalted sha256 is a sound way to keep them: there is nothing to
guess, and serving can hash a presented key per request (a slow KDF could not run there).
Every create and revoke bumps the serving revision, so replicas pick the change up at once.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from repository.errors import (
    TokenForAnotherUserError,
    TokenInvalidError,
    TokenOutranksUserError,
    TokenSettingsError,
)
from repository.models import ApiToken, Event, Role
from repository.models.tokens import EVERY_MODEL
from repository.selectors.roles import role_rank, user_role
from repository.services.events import event_record
from repository.services.revision import serving_revision_bump

KEY_PREFIX_CHARS = 8
DEFAULT_EXPIRY_DAYS = 90
MAX_EXPIRY_DAYS = 3650
# Updating last_used on every request would turn each read into a write; once a minute is plenty.
LAST_USED_RESOLUTION = timedelta(seconds=60)
# The roles a token may carry when someone else creates it for a user: only reading.
ROLES_FOR_ANOTHER_USER = frozenset({Role.VIEWER.value})
# An admin may also give an application account an invoker token: it only calls inference on the
# models it names and carries no console rights, so nobody can act or approve with it.
ROLES_AN_ADMIN_GIVES_ANOTHER_USER = ROLES_FOR_ANOTHER_USER | {Role.INVOKER.value}


def api_token_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_token_create(
    *,
    user: Any,
    role: str,
    name: str = "",
    actor: Any = None,
    models: Sequence[str] = (),
    expires_days: int = DEFAULT_EXPIRY_DAYS,
    rate_limit_rps: float | None = None,
    max_concurrency: int | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for ``user`` and return it with its plain key (shown once, never stored).

    A viewer, deployer or admin token may not exceed the user's own role
    (TokenOutranksUserError): it acts with the user's role anyway, and a list of tokens should
    not claim more than they can do. An invoker token needs no console role: it names the models
    it may call (``*`` for every one). Scope, quotas and expiry are checked together
    (TokenSettingsError lists every problem).

    An ``actor`` other than ``user`` may only create viewer tokens for them, or invoker tokens
    when the actor is an admin (TokenForAnotherUserError): whoever holds a deployer or admin
    token acts as its user, and could approve code in their name. ``actor`` None is the user
    themself.
    """
    role = Role(role).value
    names = _check_settings(role, models, expires_days, rate_limit_rps, max_concurrency)
    if role != Role.INVOKER:
        held = user_role(user)
        if held is None or role_rank(held) < role_rank(role):
            raise TokenOutranksUserError(user.get_username(), held, role)
    _require_own_or_allowed(actor=actor, user=user, role=role)
    key = secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            role=role,
            key_hash=api_token_hash(key),
            prefix=key[:KEY_PREFIX_CHARS],
            model_names=names,
            rate_limit_rps=rate_limit_rps,
            max_concurrency=max_concurrency,
            expires_at=timezone.now() + timedelta(days=expires_days),
        )
        event_record(
            actor=actor if actor is not None else user,
            action=Event.Action.TOKEN_CREATE,
            detail={"token": token.prefix, "user": user.get_username(), "role": role,
                    "models": names, "expires_at": token.expires_at.isoformat()},
        )  # fmt: skip
        serving_revision_bump()
    return token, key


def _check_settings(
    role: str,
    models: Sequence[str],
    expires_days: int,
    rate_limit_rps: float | None,
    max_concurrency: int | None,
) -> list[str]:
    names = sorted({m.strip() for m in models if m.strip()})
    problems = []
    if role == Role.INVOKER and not names:
        problems.append(f"models: an invoker token names its models (or '{EVERY_MODEL}')")
    if role != Role.INVOKER and names:
        problems.append("models: only invoker tokens are scoped to models")
    if EVERY_MODEL in names and len(names) > 1:
        problems.append(f"models: '{EVERY_MODEL}' must be the only model")
    if any("/" in n or n in (".", "..") for n in names):
        problems.append("models: a model name holds no '/' and is not '.' or '..'")
    if not 1 <= expires_days <= MAX_EXPIRY_DAYS:
        problems.append(f"expires_days: between 1 and {MAX_EXPIRY_DAYS}")
    if rate_limit_rps is not None and not rate_limit_rps > 0:
        problems.append("rate_limit_rps: positive (or none for no limit)")
    if max_concurrency is not None and max_concurrency < 1:
        problems.append("max_concurrency: at least 1 (or none for no limit)")
    if problems:
        raise TokenSettingsError(problems)
    return names


def _require_own_or_allowed(*, actor: Any, user: Any, role: str) -> None:
    if actor is None or actor.pk == user.pk:
        return
    allowed = (
        ROLES_AN_ADMIN_GIVES_ANOTHER_USER
        if user_role(actor) == Role.ADMIN
        else ROLES_FOR_ANOTHER_USER
    )
    if role not in allowed:
        raise TokenForAnotherUserError(
            actor.get_username(), user.get_username(), role, sorted(allowed)
        )


def api_token_revoke(*, token: ApiToken, actor: Any) -> ApiToken:
    """Revoke a token (idempotent); serving replicas refuse it from the next revision on."""
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
            serving_revision_bump()
    return token


def api_token_authenticate(*, key: str) -> ApiToken:
    """The live token for ``key`` (its user selected) or TokenInvalidError."""
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=api_token_hash(key or ""), revoked_at__isnull=True, expires_at__gt=now)
        .first()
    )
    if token is None or not token.user.is_active:
        raise TokenInvalidError()
    if token.last_used is None or now - token.last_used > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now
    return token


def api_tokens_mark_used(*, used: Mapping[int, datetime]) -> int:
    """Record when serving last saw each token (reported in replica heartbeats, not per request).

    Only moves ``last_used`` forward; returns how many rows changed.
    """
    changed = 0
    for token_id, when in used.items():
        changed += ApiToken.objects.filter(
            Q(last_used__isnull=True) | Q(last_used__lt=when), pk=token_id
        ).update(last_used=when)
    return changed
