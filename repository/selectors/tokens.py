"""Reading API tokens (never their keys: only hashes are stored)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from repository.models import ApiToken, Role
from repository.models.tokens import CONSOLE_ACCOUNT, EVERY_MODEL
from repository.selectors.roles import role_rank, user_role

# What serving's access snapshot reads of a token and its user (and the user's group names).
SERVING_TOKEN_FIELDS = (
    "id", "prefix", "key_hash", "role", "model_names", "expires_at", "rate_limit_rps",
    "max_concurrency", "user__id", "user__is_active", "user__is_superuser",
)  # fmt: skip


def api_token_list(*, user: Any = None, include_revoked: bool = False) -> QuerySet[ApiToken]:
    """Tokens people manage: the console's own key (its system account's row) is not one."""
    tokens = (
        ApiToken.objects.select_related("user")
        .exclude(user__username=CONSOLE_ACCOUNT)
        .order_by("-created_at")
    )
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
    groups prefetched, which decide what a non-invoker token may do).

    Serving reads this with a database role that sees only some columns of ``auth_user``
    (``deploy/postgres/serving-role.sql``: never a password hash), so only those are selected.
    """
    return (
        ApiToken.objects.select_related("user")
        .only(*SERVING_TOKEN_FIELDS)
        .prefetch_related(Prefetch("user__groups", queryset=Group.objects.only("id", "name")))
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
