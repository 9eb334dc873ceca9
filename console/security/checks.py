"""System checks run by every console management command (``runconsole`` and ``migrate``
included), so a console without a key refuses to start instead of failing on the first login."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured


@register("security")
def secret_key_present(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        if settings.SECRET_KEY:  # Django itself raises when it is empty
            return []
    except ImproperlyConfigured:
        pass
    return [
        Error(
            "SECRET_KEY is not set",
            hint="Set SECRET_KEY (or SECRET_KEY_FILE) to at least 50 random characters, e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(64))'.",
            id="portico.E001",
        )
    ]
