"""What serving may load, and which replicas are alive and serve what."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from repository.models import ModelVersion, ServingReplica, VersionState

LOADABLE_STATES = [VersionState.READY, VersionState.PROMOTED, VersionState.RETIRED]
# Replicas heartbeat every few seconds; one not heard from for this long counts as gone.
LIVE_REPLICA_MAX_AGE_S = 15.0


def servable_version_list() -> QuerySet[ModelVersion]:
    """Validated versions serving may load: code-bearing ones only once approved."""
    return (
        ModelVersion.objects.filter(state__in=LOADABLE_STATES)
        .filter(Q(needs_approval=False) | Q(approved_at__isnull=False))
        .select_related("model")
        .prefetch_related("files__blob")
        .order_by("model__name", "number")
    )


def replica_list(*, max_age_s: float | None = None) -> QuerySet[ServingReplica]:
    """Replicas by id; with ``max_age_s``, only those heard from that recently."""
    replicas = ServingReplica.objects.order_by("replica_id")
    if max_age_s is not None:
        replicas = replicas.filter(last_seen__gte=timezone.now() - timedelta(seconds=max_age_s))
    return replicas


def replica_is_live(*, replica: ServingReplica, max_age_s: float = LIVE_REPLICA_MAX_AGE_S) -> bool:
    return replica.last_seen >= timezone.now() - timedelta(seconds=max_age_s)


def replica_ready_counts(*, replicas: list[ServingReplica]) -> Counter[tuple[str, int]]:
    """How many of ``replicas`` report each (model, version) READY (malformed entries skipped)."""
    counts: Counter[tuple[str, int]] = Counter()
    for replica in replicas:
        for loaded in replica.versions or []:
            if isinstance(loaded, dict) and loaded.get("state") == "READY":
                try:
                    counts[(str(loaded.get("model")), int(loaded.get("version") or 0))] += 1
                except (TypeError, ValueError):
                    continue
    return counts
