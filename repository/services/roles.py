"""Roles are Django groups (viewer < deployer < admin); a superuser holds every role."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group

from repository.errors import PermissionDeniedError
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
    names = set(user.groups.values_list("name", flat=True))
    held = [r for r in ROLE_ORDER if r.value in names]
    return held[-1].value if held else None


def user_has_role(user: Any, role: str) -> bool:
    held = user_role(user)
    return held is not None and role_rank(held) >= role_rank(role)


def user_role_require(user: Any, role: str, *, action: str) -> None:
    if not user_has_role(user, role):
        raise PermissionDeniedError(action, role)


def role_groups_ensure() -> dict[str, Group]:
    """Create the role groups if missing (as the data migration does)."""
    return {r.value: Group.objects.get_or_create(name=r.value)[0] for r in ROLE_ORDER}


def user_role_grant(*, user: Any, role: str) -> None:
    """Put a user in the group of ``role`` (a role implies the lower ones)."""
    groups = role_groups_ensure()
    user.groups.add(groups[Role(role).value])
