"""Where the collector's inputs come from: live replicas (heartbeats) and version markers (events).

Both are plain synchronous registry reads; the collector calls them through ``sync_to_async``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from django.conf import settings

from repository.facade import live_replicas
from repository.selectors import LIVE_REPLICA_MAX_AGE_S, event_list_after

REPLICA_MAX_AGE_S = LIVE_REPLICA_MAX_AGE_S
MARKER_ACTIONS = ("promote", "rollback")


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaTarget:
    """A replica to poll: its id and the base URL of its HTTP port."""

    replica_id: str
    http_url: str


def live_replica_targets() -> list[ReplicaTarget]:
    """Replicas that heartbeated recently; with none, the configured serving URL (a replica that
    serves a plain Triton folder and writes no heartbeat)."""
    targets = [
        ReplicaTarget(replica_id=r.replica_id, http_url=r.http_url.rstrip("/"))
        for r in live_replicas(max_age_s=REPLICA_MAX_AGE_S)
        if r.http_url
    ]
    if targets:
        return targets
    extra = getattr(settings, "PORTICO_DASHBOARD_REPLICA_URLS", None) or [
        getattr(settings, "PORTICO_SERVING_HTTP_URL", "")
    ]
    return [ReplicaTarget(replica_id=url, http_url=url.rstrip("/")) for url in extra if url]


@dataclasses.dataclass(frozen=True, slots=True)
class Marker:
    """A promote or rollback, drawn as a vertical line on the charts."""

    id: int
    model: str
    action: str
    version: int | None
    from_version: int | None
    time: float
    actor: str

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def version_markers(*, since: datetime | None = None, after_id: int = 0) -> list[Marker]:
    """Promote and rollback events after ``after_id`` (and since ``since``), oldest first."""
    return [
        Marker(
            id=e.id,
            model=e.model_name,
            action=e.action,
            version=e.to_version,
            from_version=e.from_version,
            time=e.created_at.timestamp(),
            actor=e.actor_name,
        )
        for e in event_list_after(after_id=after_id, actions=MARKER_ACTIONS, since=since)
    ]


def slo_targets() -> dict[str, dict[str, object]]:
    """Every model's SLO, by model name (what the collector checks its rolling store against)."""
    from repository.tuning.selectors import slo_list
    from repository.tuning.services import slo_dict

    return {slo.model.name: slo_dict(slo) for slo in slo_list()}
