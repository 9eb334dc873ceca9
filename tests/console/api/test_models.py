"""The model list and one model: promoted version, state, live replicas, versions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from repository.models import VersionState
from repository.services import replica_heartbeat
from tests.factories import ModelFactory, ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def heartbeat(replica_id: str, versions: list[dict], *, age_s: float = 0) -> None:  # type: ignore[type-arg]
    replica_heartbeat(
        replica_id=replica_id,
        address="127.0.0.1:8001",
        http_url="http://127.0.0.1:8000",
        started_at=timezone.now() - timedelta(minutes=5),
        versions=versions,
        last_error="",
    )
    if age_s:
        from repository.models import ServingReplica

        ServingReplica.objects.filter(replica_id=replica_id).update(
            last_seen=timezone.now() - timedelta(seconds=age_s)
        )


def test_model_list_shows_promoted_version_state_and_live_replicas(as_viewer) -> None:  # type: ignore[no-untyped-def]
    served = ModelFactory(name="served")
    ModelVersionFactory(model=served, number=1, state=VersionState.RETIRED)
    ModelVersionFactory(model=served, number=2, state=VersionState.PROMOTED)
    ModelVersionFactory(model=ModelFactory(name="new"), number=1, state=VersionState.READY)
    ready = {"model": "served", "version": 2, "state": "READY", "reason": ""}
    heartbeat("r1", [ready])
    heartbeat("r2", [{**ready, "state": "LOADING"}])
    heartbeat("r3", [ready], age_s=600)  # gone quiet: not counted
    body = as_viewer.get("/api/models/").json()
    assert [m["name"] for m in body] == ["new", "served"]
    new, served_json = body
    assert (new["promoted_version"], new["state"], new["live_replicas"]) == (None, "unpromoted", 0)
    assert served_json["promoted_version"] == 2
    assert served_json["state"] == "promoted"
    assert served_json["live_replicas"] == 1
    assert served_json["version_count"] == 2


def test_model_list_is_empty_without_models(as_viewer) -> None:  # type: ignore[no-untyped-def]
    assert as_viewer.get("/api/models/").json() == []


def test_model_detail_lists_versions_newest_first(as_viewer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m", description="does things")
    ModelVersionFactory(model=model, number=1, state=VersionState.PROMOTED)
    ModelVersionFactory(model=model, number=2, state=VersionState.FAILED)
    body = as_viewer.get("/api/models/m/").json()
    assert body["name"] == "m" and body["description"] == "does things"
    assert [(v["version"], v["state"]) for v in body["versions"]] == [
        (2, "failed"),
        (1, "promoted"),
    ]


def test_model_list_query_count_does_not_grow_with_models(
    as_viewer, django_assert_max_num_queries
) -> None:  # type: ignore[no-untyped-def]
    for i in range(10):
        ModelVersionFactory(model=ModelFactory(name=f"m{i}"), number=1, state=VersionState.PROMOTED)
    with django_assert_max_num_queries(12):
        assert len(as_viewer.get("/api/models/").json()) == 10
