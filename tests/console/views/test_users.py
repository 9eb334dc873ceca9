"""Users page (admins): roles listed, higher roles granted through the registry service."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.permissions import user_role
from repository.models import Event
from tests.factories import UserFactory

pytestmark = pytest.mark.embedded


def test_admin_grants_a_higher_role(admin_client, viewer, roleless):
    body = admin_client.get(reverse("console:user-list")).content.decode()
    assert "no role: cannot sign in to any page" in body and "Make deployer" in body
    response = admin_client.post(
        reverse("console:user-role", args=[viewer.pk]), {"role": "deployer"}, follow=True
    )
    assert "viewer is now deployer" in response.content.decode()
    assert user_role(viewer) == "deployer"


def test_unknown_role_and_user(admin_client, viewer):
    response = admin_client.post(
        reverse("console:user-role", args=[viewer.pk]), {"role": "root"}, follow=True
    )
    assert "is not a role" in response.content.decode()
    assert (
        admin_client.post(reverse("console:user-role", args=[9999]), {"role": "viewer"}).status_code
        == 404
    )


def test_only_admins_manage_roles(deployer_client, viewer):
    assert deployer_client.get(reverse("console:user-list")).status_code == 403
    response = deployer_client.post(
        reverse("console:user-role", args=[viewer.pk]), {"role": "admin"}
    )
    assert response.status_code == 403
    assert user_role(viewer) == "viewer"


def test_admin_lowers_a_role_and_the_audit_log_shows_it(admin_client, admin_user, deployer):
    body = admin_client.get(reverse("console:user-list")).content.decode()
    assert "Make viewer" in body
    response = admin_client.post(
        reverse("console:user-role", args=[deployer.pk]), {"role": "viewer"}, follow=True
    )
    assert "deployer is now viewer" in response.content.decode()
    assert user_role(deployer) == "viewer"
    assert Event.objects.filter(action="role_set", actor=admin_user).count() == 1
    audit = admin_client.get(reverse("console:event-list"), {"action": "role_set"})
    assert "deployer: deployer → viewer" in audit.content.decode()


def test_last_admin_cannot_demote_themselves_from_the_page(admin_client, admin_user):
    response = admin_client.post(
        reverse("console:user-role", args=[admin_user.pk]), {"role": "viewer"}, follow=True
    )
    assert "is the last admin" in response.content.decode()
    assert user_role(admin_user) == "admin"


def test_users_page_reads_roles_in_a_fixed_number_of_queries(
    admin_client, django_assert_max_num_queries
):
    for n in range(8):
        UserFactory(username=f"user-{n}", role="viewer" if n % 2 else "deployer")
    # Session, the signed-in user and their role, then the users with their groups (prefetched).
    with django_assert_max_num_queries(8):
        assert admin_client.get(reverse("console:user-list")).status_code == 200
