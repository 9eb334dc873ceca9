"""Publishing the console's inference key to serving: its hash as an ordinary token row.

The row belongs to a system account (``CONSOLE_ACCOUNT``: no password, no role, left out of user
and token lists so nobody can revoke it or give it rights), carries the invoker role scoped to
every model, no quota and an expiry beyond any deployment. Serving, without the console's
``SECRET_KEY``, accepts the key because the row is in its token table.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from repository.console_key import console_inference_key
from repository.models import ApiToken, Role
from repository.models.tokens import CONSOLE_ACCOUNT, EVERY_MODEL
from repository.services.revision import serving_revision_bump
from repository.services.tokens import api_token_hash

CONSOLE_TOKEN_NAME = "console inference key"
CONSOLE_TOKEN_PREFIX = "console"
# Not "never" (the column is required): a date no deployment reaches.
CONSOLE_TOKEN_EXPIRY = datetime(3000, 1, 1, tzinfo=UTC)


def console_key_ensure() -> ApiToken:
    """The console key's row, created or brought to the current ``SECRET_KEY``; a change bumps
    the serving revision so replicas take the new hash at once."""
    wanted: dict[str, Any] = {
        "name": CONSOLE_TOKEN_NAME, "role": Role.INVOKER.value,
        "key_hash": api_token_hash(console_inference_key()), "prefix": CONSOLE_TOKEN_PREFIX,
        "model_names": [EVERY_MODEL], "rate_limit_rps": None, "max_concurrency": None,
        "expires_at": CONSOLE_TOKEN_EXPIRY, "revoked_at": None,
    }  # fmt: skip
    try:
        return _ensure(wanted)
    except IntegrityError:
        # Another console process made the account or row at the same moment: theirs is ours.
        return _ensure(wanted)


def _ensure(wanted: dict[str, Any]) -> ApiToken:
    with transaction.atomic():
        account = _console_account()
        token = ApiToken.objects.select_for_update().filter(user=account).order_by("pk").first()
        if token is None:
            token = ApiToken.objects.create(user=account, **wanted)
        elif any(getattr(token, field) != value for field, value in wanted.items()):
            for field, value in wanted.items():
                setattr(token, field, value)
            token.save(update_fields=list(wanted))
        else:
            return token
        serving_revision_bump()
    return token


def _console_account() -> Any:
    account, created = get_user_model().objects.get_or_create(username=CONSOLE_ACCOUNT)
    if created:
        # Nobody signs in as it: no password, no role, no staff flag.
        account.set_unusable_password()
        account.save(update_fields=["password"])
    return account
