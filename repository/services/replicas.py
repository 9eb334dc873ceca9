"""Serving replicas report what they have loaded; the console reads it back."""

from __future__ import annotations

from datetime import datetime
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
