"""Roles as the console and the management API check them.

A user's role is the registry's (``repository.services.user_role``: the highest role group,
``viewer`` < ``deployer`` < ``admin``; superusers are admins). A request authenticated with an API
token acts with the token's role, never more than its user's own, so a token cannot outrank the
person who holds it.
"""

from __future__ import annotations

from typing import Any

from repository.models import Role
from repository.selectors.roles import ROLE_ORDER, user_role

ROLE_VIEWER = Role.VIEWER.value
ROLE_DEPLOYER = Role.DEPLOYER.value
ROLE_ADMIN = Role.ADMIN.value
# The registry's order, so the console can never rank roles differently from the services.
ROLES: tuple[str, ...] = tuple(role.value for role in ROLE_ORDER)
_RANK = {role: rank for rank, role in enumerate(ROLES, start=1)}

__all__ = [
    "ROLES",
    "ROLE_ADMIN",
    "ROLE_DEPLOYER",
    "ROLE_VIEWER",
    "effective_role",
    "role_allows",
    "role_rank",
    "user_has_role",
    "user_role",
]


def effective_role(user: Any, token: Any = None) -> str | None:
    """The role a request acts with: the user's, capped by the API token's when one was used."""
    role = user_role(user)
    token_role = getattr(token, "role", None)
    if role is None or token_role is None:
        return role
    return min(role, str(token_role), key=role_rank)


def role_rank(role: str | None) -> int:
    """0 for no role, then 1..3 from viewer to admin."""
    return _RANK.get(role or "", 0)


def role_allows(role: str | None, required: str) -> bool:
    """Whether ``role`` is at least ``required``."""
    return role_rank(role) >= role_rank(required)


def user_has_role(user: Any, required: str, *, token: Any = None) -> bool:
    """Whether ``user`` (acting through ``token`` if given) holds at least the ``required`` role."""
    return role_allows(effective_role(user, token), required)
