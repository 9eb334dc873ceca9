"""Promote, roll back, approve through the pages: confirmation text, the change, clear errors."""

from __future__ import annotations

import pytest
from django.urls import reverse

from repository.models import Event
from tests.console.views.conftest import signed_in

pytestmark = pytest.mark.embedded


def test_promote_confirmation_says_what_changes(deployer_client, catalog):
    body = deployer_client.get(reverse("console:version-promote", args=["mlp", 3])).content.decode()
    assert "Promote mlp v3?" in body
    assert "v2, promoted now, becomes retired" in body
    assert "csrfmiddlewaretoken" in body
    catalog["v3"].refresh_from_db()
    assert catalog["v3"].state == "ready"  # a GET changes nothing


def test_promote_moves_the_version_and_records_an_event(deployer_client, catalog):
    response = deployer_client.post(
        reverse("console:version-promote", args=["mlp", 3]), follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("console:model-detail", args=["mlp"])
    assert "mlp v3 is promoted" in response.content.decode()
    catalog["v3"].refresh_from_db()
    catalog["v2"].refresh_from_db()
    assert (catalog["v3"].state, catalog["v2"].state) == ("promoted", "retired")
    assert Event.objects.filter(action="promote", to_version=3, from_version=2).count() == 1


def test_double_promote_changes_nothing_the_second_time(deployer_client, catalog):
    url = reverse("console:version-promote", args=["mlp", 3])
    deployer_client.post(url)
    response = deployer_client.post(url, follow=True)
    assert "cannot promote mlp v3: it is promoted" in response.content.decode()
    assert Event.objects.filter(action="promote").count() == 1


def test_promote_of_a_failed_version_says_why(deployer_client, catalog):
    catalog["v3"].state = "failed"
    catalog["v3"].save()
    response = deployer_client.post(
        reverse("console:version-promote", args=["mlp", 3]), follow=True
    )
    assert "cannot promote mlp v3: it is failed" in response.content.decode()


def test_rollback_returns_to_the_previous_version(deployer_client, catalog):
    body = deployer_client.get(reverse("console:model-rollback", args=["mlp"])).content.decode()
    assert "v1 becomes the promoted version again" in body
    response = deployer_client.post(reverse("console:model-rollback", args=["mlp"]), follow=True)
    assert "mlp v1 is promoted again" in response.content.decode()
    catalog["v1"].refresh_from_db()
    assert catalog["v1"].state == "promoted"


def test_rollback_with_nothing_to_roll_back_to_says_so(deployer_client, catalog):
    response = deployer_client.post(reverse("console:model-rollback", args=["pyfn"]), follow=True)
    assert "no earlier promoted version to roll back to" in response.content.decode()


def test_uploader_cannot_approve_their_own_code(catalog):
    from repository.services import user_role_grant

    uploader = catalog["p1"].uploaded_by
    user_role_grant(user=uploader, role="admin")
    response = signed_in(uploader).post(
        reverse("console:version-approve", args=["pyfn", 1]), follow=True
    )
    assert "someone else must approve it" in response.content.decode()
    catalog["p1"].refresh_from_db()
    assert not catalog["p1"].approved


def test_another_admin_approves_and_then_promote_is_offered(admin_client, catalog):
    body = admin_client.get(reverse("console:version-approve", args=["pyfn", 1])).content.decode()
    assert "carries Python code uploaded by deployer" in body
    response = admin_client.post(reverse("console:version-approve", args=["pyfn", 1]), follow=True)
    assert "pyfn v1 is approved" in response.content.decode()
    assert 'data-action="promote"' in response.content.decode()
    catalog["p1"].refresh_from_db()
    assert catalog["p1"].approved_by.username == "alice-admin"


def test_promote_of_unapproved_code_is_refused(deployer_client, catalog):
    response = deployer_client.post(
        reverse("console:version-promote", args=["pyfn", 1]), follow=True
    )
    assert "must be approved before it is promoted" in response.content.decode()


def test_actions_need_csrf(deployer, catalog):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(deployer)
    assert client.post(reverse("console:version-promote", args=["mlp", 3])).status_code == 403
    catalog["v3"].refresh_from_db()
    assert catalog["v3"].state == "ready"
