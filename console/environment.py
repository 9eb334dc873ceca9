"""Which settings module a process runs with: production unless something else is asked for.

``DJANGO_SETTINGS_MODULE`` wins when set. Otherwise ``PORTICO_ENV`` names the environment:
``production`` (the default), ``development`` (DEBUG on, a published key: a developer's laptop),
or ``platform`` (production-safe settings for the loopback-only run that ``make run`` starts,
with a key generated on first start). Every entry point (manage.py, ASGI, WSGI, Celery) calls
``settings_module_select`` before Django reads its settings.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

SETTINGS_BY_ENVIRONMENT = {
    "production": "console.settings.production",
    "development": "console.settings.local",
    "platform": "console.settings.platform",
}
DEFAULT_ENVIRONMENT = "production"


def settings_module_select() -> str:
    """Set ``DJANGO_SETTINGS_MODULE`` (unless it is already set) and return it."""
    if "DJANGO_SETTINGS_MODULE" not in os.environ:
        name = os.environ.get("PORTICO_ENV", "") or DEFAULT_ENVIRONMENT
        if name not in SETTINGS_BY_ENVIRONMENT:
            choices = ", ".join(SETTINGS_BY_ENVIRONMENT)
            raise ImproperlyConfigured(f"PORTICO_ENV={name!r}: expected one of {choices}")
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_BY_ENVIRONMENT[name]
    return os.environ["DJANGO_SETTINGS_MODULE"]
