"""API tokens for the management API and inference, stored as hashes."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

# Every token expires; 90 days unless its creator chose otherwise.
DEFAULT_TOKEN_EXPIRY = timedelta(days=90)
# An invoker token scoped to this "model" may call every model.
EVERY_MODEL = "*"
# The system account that holds the console's own inference key (repository.services.console_key):
# a name Django's sign-up forms never produce for a person, and left out of user and token lists.
CONSOLE_ACCOUNT = "portico.console"


def default_expiry() -> object:
    return timezone.now() + DEFAULT_TOKEN_EXPIRY


class Role(models.TextChoices):
    """Roles are Django groups of the same name; a token carries one. ``invoker`` is a token
    role only: it calls inference for the models the token names and nothing else."""

    VIEWER = "viewer"
    DEPLOYER = "deployer"
    ADMIN = "admin"
    INVOKER = "invoker"


class ApiToken(models.Model):
    """A bearer token. Only the sha256 of the key is kept; ``prefix`` identifies it on screen.

    ``model_names`` scopes an invoker token (``*``: every model); ``rate_limit_rps`` and
    ``max_concurrency`` are its inference quotas per serving replica (empty: unlimited).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=128, blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    model_names = models.JSONField(default=list, blank=True)
    rate_limit_rps = models.FloatField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(default=default_expiry)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()
