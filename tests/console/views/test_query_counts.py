"""List pages read the registry in a fixed number of queries, however many rows they show."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from repository.models import VersionState
from repository.services import event_record
from tests.factories import ModelFactory, ModelVersionFactory, UserFactory, VersionFileFactory

pytestmark = pytest.mark.embedded


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def grows_with_rows(client: Client, url: str, add_rows: Callable[[int], Any]) -> tuple[int, int]:
    # Once per process, not per row: the first page that reads live stats publishes the
    # console's inference key to the token table.
    queries_for(client, url)
    add_rows(3)
    few = queries_for(client, url)
    add_rows(12)
    return few, queries_for(client, url)


def add_models(count: int) -> None:
    start = ModelFactory._meta.model.objects.count()
    for n in range(start, start + count):
        model = ModelFactory(name=f"model-{n}")
        retired = ModelVersionFactory(model=model, number=1, state=VersionState.RETIRED)
        ModelVersionFactory(
            model=model, number=2, state=VersionState.PROMOTED, previous_promoted=retired
        )
        event_record(actor=None, action="upload", model=model, to_version=2)


def test_models_list_page_query_count_does_not_grow_with_models(deployer_client):
    few, many = grows_with_rows(deployer_client, reverse("console:model-list"), add_models)
    assert few == many


def test_audit_log_page_query_count_does_not_grow_with_events(deployer_client):
    def add_events(count: int) -> None:
        model = ModelFactory(name="audited")
        for n in range(count):
            actor = UserFactory(username=f"actor-{n}-{count}", role="deployer")
            event_record(actor=actor, action="promote", model=model, to_version=n + 1)

    few, many = grows_with_rows(deployer_client, reverse("console:event-list"), add_events)
    assert few == many


def test_model_page_query_count_does_not_grow_with_versions(deployer_client):
    model = ModelFactory(name="many-versions")

    def add_versions(count: int) -> None:
        start = model.versions.count()
        for number in range(start + 1, start + count + 1):
            VersionFileFactory(version=ModelVersionFactory(model=model, number=number))

    url = reverse("console:model-detail", args=[model.name])
    few, many = grows_with_rows(deployer_client, url, add_versions)
    assert few == many


def test_api_model_detail_query_count_does_not_grow_with_versions(deployer):
    client = Client()
    client.force_login(deployer)
    model = ModelFactory(name="api-versions")

    def add_versions(count: int) -> None:
        start = model.versions.count()
        for number in range(start + 1, start + count + 1):
            VersionFileFactory(version=ModelVersionFactory(model=model, number=number))

    few, many = grows_with_rows(client, f"/api/models/{model.name}/", add_versions)
    assert few == many
