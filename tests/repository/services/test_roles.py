"""Setting a user's role: up or down, by an admin, audited, never leaving the registry adminless."""

from __future__ import annotations

import pytest

from repository.errors import LastAdminError, PermissionDeniedError, SuperuserRoleError
from repository.models import Event
from repository.services import user_role, user_role_set
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_admin_lowers_and_raises_a_role_and_each_change_is_an_event() -> None:
    admin = UserFactory(username="root-admin", role="admin")
    user = UserFactory(username="carol", role="admin")
    assert user_role_set(user=user, role="viewer", actor=admin) == "viewer"
    assert user_role(user) == "viewer"
    assert user_role_set(user=user, role="deployer", actor=admin) == "deployer"
    assert user_role(user) == "deployer"
    events = list(Event.objects.filter(action=Event.Action.ROLE_SET).order_by("id"))
    assert [(e.actor_name, e.detail) for e in events] == [
        ("root-admin", {"user": "carol", "from": "admin", "to": "viewer"}),
        ("root-admin", {"user": "carol", "from": "viewer", "to": "deployer"}),
    ]


def test_setting_the_role_a_user_already_has_records_nothing() -> None:
    admin = UserFactory(username="root-admin", role="admin")
    user = UserFactory(username="dave", role="deployer")
    assert user_role_set(user=user, role="deployer", actor=admin) == "deployer"
    assert not Event.objects.filter(action=Event.Action.ROLE_SET).exists()


def test_the_last_admin_cannot_demote_themselves() -> None:
    admin = UserFactory(username="only-admin", role="admin")
    with pytest.raises(LastAdminError) as raised:
        user_role_set(user=admin, role="deployer", actor=admin)
    assert raised.value.code == "last_admin"
    assert user_role(admin) == "admin"
    assert not Event.objects.filter(action=Event.Action.ROLE_SET).exists()


def test_an_admin_may_step_down_while_another_admin_remains() -> None:
    admin = UserFactory(username="alice", role="admin")
    UserFactory(username="bob", role="admin")
    user_role_set(user=admin, role="viewer", actor=admin)
    assert user_role(admin) == "viewer"


def test_an_inactive_admin_does_not_count_as_the_remaining_admin() -> None:
    admin = UserFactory(username="alice", role="admin")
    gone = UserFactory(username="gone", role="admin")
    gone.is_active = False
    gone.save()
    with pytest.raises(LastAdminError):
        user_role_set(user=admin, role="viewer", actor=admin)


def test_only_admins_set_roles_and_superusers_are_left_alone() -> None:
    deployer = UserFactory(username="dora", role="deployer")
    viewer = UserFactory(username="vic", role="viewer")
    with pytest.raises(PermissionDeniedError):
        user_role_set(user=viewer, role="admin", actor=deployer)
    assert user_role(viewer) == "viewer"
    admin = UserFactory(username="alice", role="admin")
    root = UserFactory(username="root", is_superuser=True)
    with pytest.raises(SuperuserRoleError):
        user_role_set(user=root, role="viewer", actor=admin)


def test_unknown_role_is_refused() -> None:
    admin = UserFactory(username="alice", role="admin")
    with pytest.raises(ValueError):
        user_role_set(user=admin, role="root", actor=admin)
