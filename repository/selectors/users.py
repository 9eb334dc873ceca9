"""Reading users and the roles they hold."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet


def user_list() -> QuerySet[Any]:
    """Active users by name, groups prefetched (``user_role`` reads them without a query)."""
    return (
        get_user_model()
        .objects.filter(is_active=True)
        .prefetch_related("groups")
        .order_by("username")
    )


def user_get(*, user_id: int) -> Any | None:
    """An active user by id, or None."""
    return user_list().filter(pk=user_id).first()
