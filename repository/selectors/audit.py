"""Reading the audit trail."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from repository.models import Event, Model


def event_list(
    *,
    model: Model | str | None = None,
    actor: Any = None,
    actor_name: str | None = None,
    action: str | None = None,
) -> QuerySet[Event]:
    """Events newest first, optionally for one model (instance or name), actor or action.

    ``actor_name`` matches the recorded name, so events of since-deleted users and of "system"
    are found too.
    """
    events = Event.objects.select_related("actor", "model").order_by("-created_at", "-id")
    if isinstance(model, Model):
        events = events.filter(model=model)
    elif model:
        events = events.filter(model_name=model)
    if actor is not None:
        events = events.filter(actor=actor)
    if actor_name:
        events = events.filter(actor_name=actor_name)
    if action:
        events = events.filter(action=action)
    return events


def event_list_after(
    *, after_id: int, actions: Iterable[str], since: datetime | None = None, limit: int = 500
) -> list[Event]:
    """Up to ``limit`` events of ``actions`` newer than ``after_id`` (and ``since``), oldest first:
    what a poller that remembers the last id it saw needs."""
    events = Event.objects.filter(action__in=list(actions), id__gt=after_id)
    if since is not None:
        events = events.filter(created_at__gte=since)
    return list(events.order_by("id")[:limit])


def event_actor_names() -> list[str]:
    """Every name that appears as an event's actor, sorted."""
    names = Event.objects.exclude(actor_name="").values_list("actor_name", flat=True)
    return sorted(set(names.distinct()))
