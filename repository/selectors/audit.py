"""Reading the audit trail."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from repository.models import Event, Model


def event_list(
    *, model: Model | str | None = None, actor: Any = None, action: str | None = None
) -> QuerySet[Event]:
    """Events newest first, optionally for one model (instance or name), actor or action."""
    events = Event.objects.select_related("actor", "model").order_by("-created_at", "-id")
    if isinstance(model, Model):
        events = events.filter(model=model)
    elif model:
        events = events.filter(model_name=model)
    if actor is not None:
        events = events.filter(actor=actor)
    if action:
        events = events.filter(action=action)
    return events
