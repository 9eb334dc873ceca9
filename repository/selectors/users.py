"""Reading users and the roles they hold."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from repository.models.tokens import CONSOLE_ACCOUNT


def user_list(*, include_inactive: bool = False) -> QuerySet[Any]:
    """Users by name (active only unless told), groups prefetched: ``user_role`` needs no query.

    The console's system account is never listed: nobody manages it, grants it a role or gives it
    tokens.
    """
    users = (
        get_user_model()
        .objects.exclude(username=CONSOLE_ACCOUNT)
        .prefetch_related("groups")
        .order_by("username")
    )
    return users if include_inactive else users.filter(is_active=True)


def user_get(
    *, user_id: int | None = None, username: str | None = None, include_inactive: bool = False
) -> Any | None:
    """A user by id or by username, or None."""
    if user_id is None and username is None:
        raise ValueError("user_get needs a user_id or a username")
    users = user_list(include_inactive=include_inactive)
    if user_id is not None:
        users = users.filter(pk=user_id)
    if username is not None:
        users = users.filter(username=username)
    return users.first()
