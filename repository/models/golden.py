"""Golden requests: inputs with trusted outputs that every later version must reproduce."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from repository.models.catalog import Model, ModelVersion


class GoldenState(models.TextChoices):
    """Recording runs the inputs on the trusted version in a child process, in the background."""

    RECORDING = "recording"
    RECORDED = "recorded"
    FAILED = "failed"


class GoldenRequest(models.Model):
    """Inputs (KServe v2 JSON) and the outputs a trusted version gave, compared within rtol/atol.

    ``expected_outputs`` maps output name to ``{"datatype", "shape", "data"}``. ``last_results`` is
    the latest replay: ``{"version": n, "ok": bool, "message": str}``.
    """

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="golden_requests")
    name = models.CharField(max_length=128)
    inputs = models.JSONField()
    expected_outputs = models.JSONField(default=dict, blank=True)
    rtol = models.FloatField(default=1e-5)
    atol = models.FloatField(default=1e-6)
    recorded_from = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(
        max_length=16, choices=GoldenState.choices, default=GoldenState.RECORDING
    )
    error = models.TextField(blank=True, default="")
    last_results = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["model", "name"], name="golden_name_unique_per_model"),
            models.CheckConstraint(
                condition=models.Q(rtol__gte=0) & models.Q(atol__gte=0),
                name="golden_tolerance_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}/{self.name}"
