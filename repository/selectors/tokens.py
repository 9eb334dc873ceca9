"""Reading API tokens (never their keys: only hashes are stored)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from repository.models import ApiToken


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
