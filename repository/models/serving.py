"""What serving replicas read (the revision) and write back (their heartbeat)."""

from __future__ import annotations

from django.db import models


class ServingRevision(models.Model):
    """A single row: a counter bumped in the same transaction as any change to what is served."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    value = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(id=1), name="serving_revision_single_row"),
        ]

    def __str__(self) -> str:
        return f"revision {self.value}"


class ServingReplica(models.Model):
    """A serving replica's latest heartbeat: where it listens and what it has loaded."""

    replica_id = models.CharField(max_length=128, unique=True)
    address = models.CharField(max_length=255, blank=True, default="")
    http_url = models.CharField(max_length=255, blank=True, default="")
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    # [{"model", "version", "state": "LOADING|READY|UNAVAILABLE|UNLOADING", "reason"}]
    versions = models.JSONField(default=list, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["replica_id"]

    def __str__(self) -> str:
        return self.replica_id
