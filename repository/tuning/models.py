"""SLOs and the load-test and tuning jobs (their state, progress and results live in these rows)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from repository.models.catalog import Model, ModelVersion


class JobState(models.TextChoices):
    """``queued → running → succeeded | failed | cancelled``; only tuning services move it."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class Slo(models.Model):
    """A model's service-level objective: a latency percentile target, an error budget and the
    arrival rate it is expected to carry (what load tests and the tuner measure at)."""

    class Percentile(models.IntegerChoices):
        P95 = 95
        P99 = 99

    model = models.OneToOneField(Model, on_delete=models.CASCADE, related_name="slo")
    percentile = models.PositiveSmallIntegerField(choices=Percentile.choices, default=95)
    latency_ms = models.FloatField()
    max_error_rate = models.FloatField(default=0.001)
    expected_rate_per_s = models.FloatField(default=0)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(latency_ms__gt=0), name="slo_latency_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(max_error_rate__gte=0) & models.Q(max_error_rate__lte=1),
                name="slo_error_rate_is_a_fraction",
            ),
            models.CheckConstraint(
                condition=models.Q(expected_rate_per_s__gte=0), name="slo_rate_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model.name}: p{self.percentile} <= {self.latency_ms:g} ms"


class Job(models.Model):
    """What load tests and tunings share: the version measured, who asked, state and progress.

    ``heartbeat_at`` is touched while a worker runs the job; a running job whose heartbeat went
    stale lost its worker and is resumed (or failed with the reason) by the start-up sweep.
    """

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    progress = models.FloatField(default=0)
    message = models.CharField(max_length=300, blank=True, default="")
    error = models.TextField(blank=True, default="")
    parameters = models.JSONField(default=dict, blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(progress__gte=0) & models.Q(progress__lte=1),
                name="%(class)s_progress_is_a_fraction",
            ),
        ]

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


class LoadTest(Job):
    """One load test of one version at a fixed shape; ``result`` is one run's numbers
    (see ``repository.tuning.measure.RunResult``)."""

    result = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"load test {self.pk} of {self.version}"


class Tuning(Job):
    """A sweep over batching and instance settings of one version against an SLO.

    ``slo`` is the objective it was run against (a copy: the model's SLO may change later);
    ``results`` holds one entry per setting measured so far (a resumed job skips those);
    ``recommendation`` names the winning setting and why; ``applied_version`` is the version that
    applying it created.
    """

    slo = models.JSONField(default=dict)
    results = models.JSONField(default=list, blank=True)
    recommendation = models.JSONField(default=dict, blank=True)
    applied_version = models.ForeignKey(
        ModelVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"tuning {self.pk} of {self.version}"


class SampleInput(models.Model):
    """Inputs uploaded for load tests of one version, checked against its config when uploaded;
    a load test without inputs of its own sends these (before the model's golden requests)."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=200)
    inputs = models.JSONField(help_text="KServe v2 JSON inputs: name, datatype, shape, data.")
    size_bytes = models.PositiveIntegerField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"sample input {self.name} of {self.version}"

    @property
    def shape_summary(self) -> str:
        return ", ".join(f"{i['name']} {i['datatype']}{list(i['shape'])}" for i in self.inputs)
