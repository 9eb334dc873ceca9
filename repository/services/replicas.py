"""Serving replicas report what they have loaded; the console reads it back."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from repository.models import ServingReplica


def replica_heartbeat(
    *,
    replica_id: str,
    address: str,
    http_url: str,
    started_at: datetime,
    versions: list[dict[str, Any]],
    last_error: str,
) -> ServingReplica:
    """Upsert a replica's heartbeat row (one per replica id)."""
    replica, _ = ServingReplica.objects.update_or_create(
        replica_id=replica_id,
        defaults={
            "address": address,
            "http_url": http_url,
            "started_at": started_at,
            "last_seen": timezone.now(),
            "versions": list(versions),
            "last_error": last_error or "",
        },
    )
    return replica


def replicas_prune_stale(*, older_than_s: float) -> list[str]:
    """Delete the rows of replicas not heard from for ``older_than_s`` seconds; their ids.

    A replica's id names its process, so every restart adds a row: without this the table, and
    the console's list of replicas that once were, grows with each deploy."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    stale = ServingReplica.objects.filter(last_seen__lt=cutoff)
    ids = list(stale.values_list("replica_id", flat=True))
    stale.filter(replica_id__in=ids).delete()
    return ids
