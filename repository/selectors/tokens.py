"""Reading API tokens (never their keys: only hashes are stored)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from repository.models import ApiToken, Role
from repository.models.tokens import EVERY_MODEL
from repository.selectors.roles import role_rank, user_role


def api_token_list(*, user: Any = None, include_revoked: bool = False) -> QuerySet[ApiToken]:
    tokens = ApiToken.objects.select_related("user").order_by("-created_at")
    if user is not None:
        tokens = tokens.filter(user=user)
    if not include_revoked:
        tokens = tokens.filter(revoked_at__isnull=True)
    return tokens


def api_token_get(*, token_id: int) -> ApiToken | None:
    """A token (revoked or not) by id, or None."""
    return api_token_list(include_revoked=True).filter(pk=token_id).first()


def api_token_live_list() -> QuerySet[ApiToken]:
    """Tokens that authenticate now: not revoked, not expired, their user active (with the user's
    groups prefetched, which decide what a non-invoker token may do)."""
    return (
        ApiToken.objects.select_related("user")
        .prefetch_related("user__groups")
        .filter(revoked_at__isnull=True, expires_at__gt=timezone.now(), user__is_active=True)
        .order_by("pk")
    )


def api_token_inference_scope(token: ApiToken) -> tuple[tuple[str, ...] | None, bool]:
    """What a token may do on serving: ``(models, may_infer)``, ``models`` None for every model.

    Invokers call the models they name. Other roles act with the lower of the token's and the
    user's role: deployers and admins read and call every model; viewers read every model's
    metadata, config and statistics but call none; a user without a role gets nothing.
    """
    if token.role == Role.INVOKER:
        names = tuple(token.model_names)
        return (None if EVERY_MODEL in names else names), True
    held = user_role(token.user)
    if held is None:
        return (), False
    role = min(held, token.role, key=role_rank)
    return None, role != Role.VIEWER
