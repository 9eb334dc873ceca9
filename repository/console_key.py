"""The console's own inference key: derived from ``SECRET_KEY``, never stored, never shown.

The console's Try-it and its live-stats readers call serving with it, after checking the signed-in
user's role themselves (they act with that user's rights). Serving's access snapshot lists its hash
beside the registry's tokens, with every model in scope and no quota, so console and serving must
share ``SECRET_KEY`` (they do: both run the same settings); rotating the secret rotates this key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.conf import settings

CONSOLE_TOKEN_PREFIX = "console"
_PURPOSE = b"portico.console.inference-key.v1"


def console_inference_key() -> str:
    digest = hmac.new(settings.SECRET_KEY.encode(), _PURPOSE, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def console_authorization() -> dict[str, str]:
    """The header the console sends to serving."""
    return {"Authorization": f"Bearer {console_inference_key()}"}
