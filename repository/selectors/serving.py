"""What serving may load, and which replicas are alive."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from repository.models import ModelVersion, ServingReplica, VersionState

LOADABLE_STATES = [VersionState.READY, VersionState.PROMOTED, VersionState.RETIRED]


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
    replicas = ServingReplica.objects.order_by("replica_id")
    if max_age_s is not None:
        replicas = replicas.filter(last_seen__gte=timezone.now() - timedelta(seconds=max_age_s))
    return replicas
