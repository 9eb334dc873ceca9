"""Roles are Django groups (viewer < deployer < admin); a superuser holds every role."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Q

from repository.errors import LastAdminError, PermissionDeniedError, SuperuserRoleError
from repository.models import Event, Role
from repository.services.events import event_record

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


def user_role_set(*, user: Any, role: str, actor: Any) -> str:
    """Give ``user`` exactly ``role`` (higher or lower than now), by an admin; returns the role.

    Refused for superusers (they hold every role whatever their groups) and when it would leave no
    active admin, so nobody can lock the registry out of approvals, roles and tokens.
    """
    user_role_require(actor, Role.ADMIN, action="set roles")
    new = Role(role).value
    if user.is_superuser:
        raise SuperuserRoleError(user.get_username())
    groups = role_groups_ensure()
    with transaction.atomic():
        # NOTE: locking the admin group serialises role changes, so two admins demoting each
        # other at once cannot both pass the last-admin check.
        Group.objects.select_for_update().get(pk=groups[Role.ADMIN.value].pk)
        old = user_role(user)
        if old == new:
            return new
        if old == Role.ADMIN.value and not _other_admin_exists(user):
            raise LastAdminError(user.get_username(), new)
        user.groups.remove(*groups.values())
        user.groups.add(groups[new])
        event_record(
            actor=actor,
            action=Event.Action.ROLE_SET,
            detail={"user": user.get_username(), "from": old, "to": new},
        )
    return new


def _other_admin_exists(user: Any) -> bool:
    admins = Q(is_superuser=True) | Q(groups__name=Role.ADMIN.value)
    others = get_user_model().objects.filter(admins, is_active=True).exclude(pk=user.pk)
    return others.exists()
