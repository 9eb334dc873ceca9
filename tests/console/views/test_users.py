"""Users page (admins): roles listed, higher roles granted through the registry service."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.permissions import user_role

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
