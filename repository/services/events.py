"""Writing the audit trail: every service that mutates the registry calls ``event_record``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from repository.models import Event, Model

SYSTEM_ACTOR = "system"


def event_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    model: Model | None = None,
    from_version: int | None = None,
    to_version: int | None = None,
    detail: dict[str, Any] | None = None,
) -> Event:
    """Append one event (call inside the mutation's transaction so both commit or neither)."""
    return Event.objects.create(
        actor=actor if actor is not None and actor.pk else None,
        actor_name=actor.get_username() if actor is not None else SYSTEM_ACTOR,
        action=action,
        model=model,
        model_name=model.name if model is not None else "",
        from_version=from_version,
        to_version=to_version,
        detail=detail or {},
    )
