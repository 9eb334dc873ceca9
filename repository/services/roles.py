"""Granting and setting roles (Django groups). Reading them is ``repository.selectors.roles``;
its functions are re-exported here for the callers that predate that split."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Q

from repository.errors import LastAdminError, PermissionDeniedError, SuperuserRoleError
from repository.models import Event, Role
from repository.selectors.roles import ROLE_ORDER, role_rank, user_has_role, user_role
from repository.services.events import event_record
from repository.services.revision import serving_revision_bump

__all__ = [
    "ROLE_ORDER",
    "role_groups_ensure",
    "role_rank",
    "user_has_role",
    "user_role",
    "user_role_grant",
    "user_role_require",
    "user_role_set",
]


def user_role_require(*, user: Any, role: str, action: str) -> None:
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
    user_role_require(user=actor, role=Role.ADMIN, action="set roles")
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
        # The user's tokens act with the new role on serving too (a demoted deployer stops
        # inferring), so replicas re-read their token table.
        serving_revision_bump()
    return new


def _other_admin_exists(user: Any) -> bool:
    admins = Q(is_superuser=True) | Q(groups__name=Role.ADMIN.value)
    others = get_user_model().objects.filter(admins, is_active=True).exclude(pk=user.pk)
    return others.exists()
