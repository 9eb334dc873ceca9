"""API tokens for the management API and inference, stored as hashes."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    """Roles are Django groups of the same name; a token carries one."""

    VIEWER = "viewer"
    DEPLOYER = "deployer"
    ADMIN = "admin"


class ApiToken(models.Model):
    """A bearer token. Only the sha256 of the key is kept; ``prefix`` identifies it on screen."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=128, blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None
