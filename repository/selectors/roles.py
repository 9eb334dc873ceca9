"""Reading roles: Django groups (viewer < deployer < admin); a superuser holds every role."""

from __future__ import annotations

from typing import Any

from repository.models import Role

ROLE_ORDER = [Role.VIEWER, Role.DEPLOYER, Role.ADMIN]


def role_rank(role: str) -> int:
    return ROLE_ORDER.index(Role(role))


def user_role(user: Any) -> str | None:
    """The highest role a user holds, or None."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if user.is_superuser:
        return Role.ADMIN.value
    # Iterating ``groups.all()`` (not ``values_list``) lets a list page prefetch the groups.
    names = {group.name for group in user.groups.all()}
    held = [r for r in ROLE_ORDER if r.value in names]
    return held[-1].value if held else None


def user_has_role(user: Any, role: str) -> bool:
    held = user_role(user)
    return held is not None and role_rank(held) >= role_rank(role)
