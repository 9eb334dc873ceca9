"""Display helpers for the console templates: roles, sizes, durations, state badges."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from console.permissions import role_allows, user_role

register = template.Library()


@register.filter
def has_role(user: Any, required: str) -> bool:
    """``{% if request.user|has_role:"deployer" %}``: hides what the role cannot do."""
    if not getattr(user, "is_authenticated", False):
        return False
    # One role lookup per request, however many buttons a page has.
    if not hasattr(user, "_console_role"):
        user._console_role = user_role(user)
    return role_allows(user._console_role, required)


@register.filter
def filesize(value: Any) -> str:
    """Bytes as a short human size (``12.3 MB``)."""
    try:
        size = float(value)
    except (TypeError, ValueError):
        return "—"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


@register.filter
def duration_ms(value: Any) -> str:
    """Milliseconds as ``340 ms`` or ``2.4 s``."""
    if value in (None, ""):
        return "—"
    ms = float(value)
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


@register.filter
def age(value: datetime | None) -> str:
    """Seconds, minutes, hours or days since ``value`` (``3 s``, ``5 min``)."""
    if value is None:
        return "—"
    seconds = max(0, int((timezone.now() - value).total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


@register.filter
def short_sha(value: str | None) -> str:
    return (value or "")[:12] or "—"


@register.filter
def dash(value: Any) -> Any:
    """``—`` for missing values, so empty cells still read as "nothing here"."""
    return "—" if value in (None, "") else value


@register.filter
def failed_step(steps: Any) -> dict[str, Any] | None:
    """The first failed validation step (what a failure summary names)."""
    for step in steps or []:
        if isinstance(step, dict) and step.get("status") == "failed":
            return step
    return None


@register.filter
def passed_count(steps: Any) -> int:
    return sum(1 for s in steps or [] if isinstance(s, dict) and s.get("status") == "passed")


@register.filter
def lookup(mapping: Any, key: Any) -> Any:
    """``{{ actions|lookup:version.pk }}``: a dict entry by a variable key."""
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def load_state(entry: Any) -> str:
    """CSS class of a replica's version entry: an unload on purpose is not an error."""
    state = str((entry or {}).get("state", ""))
    if state == "UNAVAILABLE" and (entry.get("reason") or "") in ("", "unloaded"):
        return "retired"
    return state


@register.filter
def is_load_error(entry: Any) -> bool:
    return load_state(entry) == "UNAVAILABLE"
