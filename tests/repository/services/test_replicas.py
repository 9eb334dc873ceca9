"""Replica rows: the worker's sweep removes replicas that stopped heartbeating, keeps live ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from repository.models import ServingReplica
from repository.services import replica_heartbeat, replicas_prune_stale
from repository.sweep import registry_sweep

pytestmark = [pytest.mark.embedded, pytest.mark.django_db]


def heartbeat(replica_id: str, *, seconds_ago: float) -> None:
    replica_heartbeat(replica_id=replica_id, address="h:8000", http_url="http://h:8000",
                      started_at=timezone.now(), versions=[], last_error="")  # fmt: skip
    ServingReplica.objects.filter(replica_id=replica_id).update(
        last_seen=timezone.now() - timedelta(seconds=seconds_ago)
    )


def test_prune_removes_replicas_not_heard_from_and_keeps_live_ones() -> None:
    heartbeat("gone-1234", seconds_ago=600)
    heartbeat("live-5678", seconds_ago=1)
    assert replicas_prune_stale(older_than_s=120) == ["gone-1234"]
    assert list(ServingReplica.objects.values_list("replica_id", flat=True)) == ["live-5678"]


@pytest.mark.django_db(transaction=True)  # the sweep closes its connection, as on its own thread
def test_the_sweep_prunes_after_the_configured_age(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_REPLICA_PRUNE_AFTER_S = 30
    heartbeat("restarted-1", seconds_ago=31)
    heartbeat("restarted-2", seconds_ago=29)
    registry_sweep()
    assert list(ServingReplica.objects.values_list("replica_id", flat=True)) == ["restarted-2"]
