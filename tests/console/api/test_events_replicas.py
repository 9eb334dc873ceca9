"""The audit log (filters, pagination) and the serving replicas list."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from repository.models import ServingReplica
from repository.services import replica_heartbeat
from tests.console.api.conftest import assert_error
from tests.factories import EventFactory, ModelFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_events_are_filtered_by_model_user_and_action(as_viewer, deployer) -> None:  # type: ignore[no-untyped-def]
    a, b = ModelFactory(name="a"), ModelFactory(name="b")
    EventFactory(model=a, action="upload", actor=deployer, actor_name=deployer.username)
    EventFactory(model=a, action="promote", actor=deployer, actor_name=deployer.username)
    EventFactory(model=b, action="promote")
    page = as_viewer.get("/api/events/").json()
    assert page["count"] == 3
    assert set(page["results"][0]) >= {"id", "created_at", "actor", "action", "model", "detail"}

    def names(query: str) -> list[tuple[str, str]]:
        results = as_viewer.get(f"/api/events/?{query}").json()["results"]
        return sorted((e["model"], e["action"]) for e in results)

    assert names("model=a") == [("a", "promote"), ("a", "upload")]
    assert names("action=promote") == [("a", "promote"), ("b", "promote")]
    assert names(f"user={deployer.username}&action=upload") == [("a", "upload")]
    assert names("user=nobody-at-all") == []


def test_events_are_newest_first_and_paginated(as_viewer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    for version in range(1, 8):
        EventFactory(model=model, to_version=version)
    first = as_viewer.get("/api/events/?page_size=5").json()
    assert first["count"] == 7
    assert [e["to_version"] for e in first["results"]] == [7, 6, 5, 4, 3]
    second = as_viewer.get(first["next"]).json()
    assert [e["to_version"] for e in second["results"]] == [2, 1]


def test_events_link_to_the_model_and_version_they_concern(as_viewer) -> None:  # type: ignore[no-untyped-def]
    EventFactory(model=ModelFactory(name="m"), to_version=2)
    EventFactory(model=None, model_name="", action="token_create")
    token_event, version_event = as_viewer.get("/api/events/").json()["results"]
    assert version_event["links"] == {
        "model": "/api/models/m/",
        "version": "/api/models/m/versions/2/",
    }
    assert token_event["links"] == {}


def test_unknown_action_filter_is_400(as_viewer) -> None:  # type: ignore[no-untyped-def]
    body = assert_error(as_viewer.get("/api/events/?action=explode"), 400, "invalid")
    assert "action" in body["message"]


def test_page_past_the_end_is_404(as_viewer) -> None:  # type: ignore[no-untyped-def]
    assert_error(as_viewer.get("/api/events/?page=9"), 404, "not_found")


def test_replicas_list_with_uptime_liveness_and_versions(as_viewer) -> None:  # type: ignore[no-untyped-def]
    versions = [{"model": "m", "version": 1, "state": "UNAVAILABLE", "reason": "load failed: x"}]
    for replica_id in ("r1", "r2"):
        replica_heartbeat(
            replica_id=replica_id,
            address="10.0.0.1:8001",
            http_url="http://10.0.0.1:8000",
            started_at=timezone.now() - timedelta(seconds=120),
            versions=versions,
            last_error="load failed: x",
        )
    ServingReplica.objects.filter(replica_id="r2").update(
        last_seen=timezone.now() - timedelta(minutes=5)
    )
    body = as_viewer.get("/api/replicas/").json()
    assert [(r["replica_id"], r["live"]) for r in body] == [("r1", True), ("r2", False)]
    assert body[0]["uptime_s"] >= 120
    assert body[0]["versions"] == versions
    assert body[0]["last_error"] == "load failed: x"
    live = as_viewer.get("/api/replicas/?live=true").json()
    assert [r["replica_id"] for r in live] == ["r1"]


def test_token_changes_appear_in_the_audit_log(as_admin) -> None:  # type: ignore[no-untyped-def]
    UserFactory(username="bot", role="viewer")
    created = as_admin.post("/api/tokens/", {"name": "ci", "role": "viewer", "user": "bot"})
    as_admin.delete(f"/api/tokens/{created.json()['id']}/")
    actions = [e["action"] for e in as_admin.get("/api/events/").json()["results"]]
    assert actions == ["token_revoke", "token_create"]
