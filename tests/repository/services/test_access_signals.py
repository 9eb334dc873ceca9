"""Access changed outside the services (Django's admin, a shell) still bumps the serving revision,
so replicas re-read their token table at once; a login does not."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from repository.services import api_token_create, serving_revision_current
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_deactivating_a_user_bumps_the_revision() -> None:
    user = UserFactory()
    api_token_create(user=user, role="invoker", models=["fraud"])
    before = serving_revision_current()
    user.is_active = False
    user.save()
    assert serving_revision_current() > before


def test_a_login_or_a_name_change_does_not() -> None:
    user = UserFactory()
    before = serving_revision_current()
    user.last_login = timezone.now()
    user.save(update_fields=["last_login"])
    user.first_name = "Ada"
    user.save()
    assert serving_revision_current() == before


def test_group_change_and_deletions_bump_the_revision() -> None:
    user = UserFactory()
    row, _ = api_token_create(user=user, role="invoker", models=["fraud"])
    group, _ = Group.objects.get_or_create(name="deployer")
    steps = [
        lambda: user.groups.add(group),
        lambda: user.groups.remove(group),
        row.delete,
        user.delete,
    ]
    for step in steps:
        before = serving_revision_current()
        step()
        assert serving_revision_current() > before
