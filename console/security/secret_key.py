"""The console's ``SECRET_KEY``: checked when given, generated and kept when the run is local.

Sessions, CSRF tokens and password-reset links are all signed with it, so a short or published key
lets anyone forge them. Settings call the first three (they read no settings); the console's
entry points call ``secret_key_required`` once settings are loaded.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

MIN_LENGTH = 50
# Keys that were published in this repository at some point: never accepted outside development.
KNOWN_KEYS = frozenset(
    {"portico-insecure-development-key", "change-me-in-production", "build-only"}
)
KEY_FILE_MODE = 0o600


def secret_key_check(key: str, *, source: str) -> str:
    """``key`` if it is fit for a deployment; ImproperlyConfigured naming ``source`` otherwise."""
    if key in KNOWN_KEYS or key.startswith(("portico-insecure", "django-insecure")):
        raise ImproperlyConfigured(f"{source}: this SECRET_KEY is published; generate your own")
    if len(key) < MIN_LENGTH or len(set(key)) < 5:
        raise ImproperlyConfigured(
            f"{source}: SECRET_KEY must be at least {MIN_LENGTH} random characters, got {len(key)}"
        )
    return key


def secret_key_generate() -> str:
    """A new random key (86 URL-safe characters)."""
    return secrets.token_urlsafe(64)


def secret_key_from_file(path: Path) -> str:
    """The key kept in ``path``, written there (mode 0600) on the first call.

    Created with ``O_EXCL`` so two processes starting at once agree on one key.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    except FileExistsError:
        return secret_key_check(path.read_text().strip(), source=str(path))
    with os.fdopen(fd, "w") as handle:
        handle.write(secret_key_generate() + "\n")
    return secret_key_check(path.read_text().strip(), source=str(path))


def secret_key_required() -> None:
    """Stops a console process that would sign sessions and CSRF tokens with no key.

    Other processes (the worker, migrations, ``create_token``) sign nothing and run without one.
    """
    from django.conf import settings

    try:
        if settings.SECRET_KEY:
            return
    except ImproperlyConfigured:  # Django raises on an empty key
        pass
    raise ImproperlyConfigured(
        "SECRET_KEY is not set: the console signs sessions and CSRF tokens with it. Set "
        f"SECRET_KEY (or SECRET_KEY_FILE) to at least {MIN_LENGTH} random characters, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(64))'"
    )
