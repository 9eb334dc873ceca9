"""While the validation sandbox is switched off, every console page says so in a red banner."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.console.views.conftest import signed_in

pytestmark = pytest.mark.embedded

PAGES = [
    ("console:model-list", []),
    ("console:model-detail", ["mlp"]),
    ("console:event-list", []),
    ("console:replica-list", []),
    ("console:upload", []),
    ("console:token-list", []),
    ("login", []),
]
BANNER = 'id="sandbox-off-banner"'


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_every_page_shows_the_banner_while_the_sandbox_is_off(  # type: ignore[no-untyped-def]
    settings, admin_user, catalog, name, args
) -> None:
    settings.PORTICO_VALIDATION_SANDBOX = "off"
    client = signed_in(admin_user) if name != "login" else Client()
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    assert BANNER in response.content.decode()
    assert "PORTICO_VALIDATION_SANDBOX=off" in response.content.decode()


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_no_banner_while_the_sandbox_is_on(settings, admin_user, catalog, name, args) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_VALIDATION_SANDBOX = "bwrap"
    client = signed_in(admin_user) if name != "login" else Client()
    response = client.get(reverse(name, args=args))
    assert response.status_code == 200
    assert BANNER not in response.content.decode()
