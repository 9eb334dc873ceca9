"""The append-only audit trail."""

from __future__ import annotations

from typing import Any, NoReturn

from django.conf import settings
from django.db import models

from repository.models.catalog import Model


class Event(models.Model):
    """Who did what to which model, when, from which version to which. Never updated or deleted."""

    class Action(models.TextChoices):
        UPLOAD = "upload"
        VALIDATION_STARTED = "validation_started"
        VALIDATED = "validated"
        VALIDATION_FAILED = "validation_failed"
        PROMOTE = "promote"
        ROLLBACK = "rollback"
        APPROVE = "approve"
        GOLDEN_RECORD = "golden_record"
        GOLDEN_DELETE = "golden_delete"
        TOKEN_CREATE = "token_create"
        TOKEN_REVOKE = "token_revoke"
        IMPORT = "import"
        ROLE_SET = "role_set"
        SLO_SET = "slo_set", "SLO set"
        LOADTEST_START = "loadtest_start", "Load test started"
        TUNING_START = "tuning_start", "Tuning started"
        TUNING_APPLY = "tuning_apply", "Tuning applied"
        JOB_FINISH = "job_finish", "Load test or tuning finished"
        SAMPLE_INPUT_ADD = "sample_input_add", "Sample input uploaded"
        SAMPLE_INPUT_DELETE = "sample_input_delete", "Sample input deleted"

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept as text too so the trail still reads right after a user is deleted (or for "system").
    actor_name = models.CharField(max_length=150, blank=True, default="")
    action = models.CharField(max_length=32, choices=Action.choices)
    model = models.ForeignKey(
        Model, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    model_name = models.CharField(max_length=128, blank=True, default="")
    from_version = models.PositiveIntegerField(null=True, blank=True)
    to_version = models.PositiveIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.model_name}"
        )

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ValueError("events are append-only")
