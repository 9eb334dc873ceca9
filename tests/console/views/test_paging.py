"""Paged lists keep their filters in the page links; form redirects stay on this site."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import reverse

from console.views import events, models
from console.views.feedback import safe_next
from repository.services import event_record
from tests.factories import ModelFactory

pytestmark = pytest.mark.embedded


def test_audit_log_page_links_keep_the_filters(deployer_client):
    model = ModelFactory(name="paged")
    for n in range(events.PAGE_SIZE + 1):
        event_record(actor=None, action="promote", model=model, to_version=n + 1)
    body = deployer_client.get(reverse("console:event-list"), {"action": "promote"}).content
    assert b'href="?action=promote&page=2">Older' in body


def test_models_list_page_links_keep_search_and_sort(deployer_client, monkeypatch):
    monkeypatch.setattr(models, "PAGE_SIZE", 2)
    for n in range(3):
        ModelFactory(name=f"paged-{n}")
    url = reverse("console:model-list")
    body = deployer_client.get(url, {"q": "paged", "sort": "-name"}).content.decode()
    assert 'href="?q=paged&amp;sort=-name&page=2">Next' in body
    second = deployer_client.get(url, {"q": "paged", "sort": "-name", "page": 2}).content.decode()
    assert "paged-0" in second and "paged-2" not in second


@pytest.mark.parametrize(
    ("given", "expected"),
    [("/models/m/", "/models/m/"), ("//evil.example/", "/home/"), ("https://x/", "/home/")],
)
def test_next_redirects_only_to_local_paths(given, expected):
    request = RequestFactory().post("/", {"next": given})
    assert safe_next(request, "/home/") == expected
