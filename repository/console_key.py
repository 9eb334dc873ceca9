"""The console's own inference key: derived from ``SECRET_KEY``, never stored, never shown.

The console's Try-it and its live-stats readers call serving with it, after checking the signed-in
user's role themselves (they act with that user's rights). Only its sha256 reaches serving, as an
ordinary token row of a system account (``repository.services.console_key``): serving runs without
the console's ``SECRET_KEY`` and finds the key in its token table like any other. Rotating the
secret rotates the key; the row follows at the console's next start or call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.conf import settings

_PURPOSE = b"portico.console.inference-key.v1"
# The hash this process has made sure the token table holds (None: not yet, or a new SECRET_KEY).
_published_hash: str | None = None


def console_inference_key() -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), _PURPOSE, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def console_key_publish() -> None:
    """Make sure the token table lists the current key's hash (once per process and key)."""
    global _published_hash
    key_hash = hashlib.sha256(console_inference_key().encode()).hexdigest()
    if _published_hash == key_hash:
        return
    # Imported here: the service derives the key from this module.
    from repository.services.console_key import console_key_ensure

    console_key_ensure()
    _published_hash = key_hash


def console_key_forget() -> None:
    """Drop the per-process memory (the next call checks the table again)."""
    global _published_hash
    _published_hash = None


def console_authorization() -> dict[str, str]:
    """The header the console sends to serving, its hash published first (a database call, so
    async callers run this in a thread)."""
    console_key_publish()
    return {"Authorization": f"Bearer {console_inference_key()}"}
