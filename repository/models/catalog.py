"""Models, their immutable versions, and the content-addressed blobs those versions are made of."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class VersionState(models.TextChoices):
    """Where a version stands. Only services in ``repository.services`` move it.

    ``uploaded → validating → ready | failed``; ``ready | retired → promoted``; the promoted version
    that another one replaces becomes ``retired``.
    """

    UPLOADED = "uploaded"
    VALIDATING = "validating"
    READY = "ready"
    FAILED = "failed"
    PROMOTED = "promoted"
    RETIRED = "retired"


class GpuCheck(models.TextChoices):
    """The GPU part of a version's check, when the worker that validated it had no usable GPU.

    ``pending`` until the first GPU replica to load it has run its warm-up and golden requests
    there (``passed`` or ``failed``, recorded from that replica's heartbeat); empty when nothing
    was left to check on a GPU.
    """

    NOT_NEEDED = "", "not needed"
    PENDING = "pending", "pending"
    PASSED = "passed", "passed"
    FAILED = "failed", "failed"


class Model(models.Model):
    """A servable model: its name is the name clients use in the inference API."""

    name = models.CharField(max_length=128, unique=True)
    backend = models.CharField(max_length=64, blank=True, default="")
    platform = models.CharField(max_length=64, blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="owned_models",
    )
    description = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(name__regex=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$"),
                name="model_name_is_a_safe_path_segment",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Blob(models.Model):
    """File content stored once, addressed by its sha256, however many versions share it."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(size__gte=0), name="blob_size_not_negative"),
            models.CheckConstraint(
                condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"),
                name="blob_sha256_is_lowercase_hex",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"


class ModelVersion(models.Model):
    """One immutable version of a model: its files, its own full config and its validation report.

    ``config_text`` is the complete config validation produced (auto-completed and normalised);
    ``submitted_config_text`` is what the uploader gave (may be empty). ``validation_steps`` is the
    report, one ``{"name", "status", "message", "duration_ms"}`` per step, updated while it runs.
    A code-bearing version (``needs_approval``) is approved by an admin who uploaded none of its
    files (``approved_by``, ``approved_at`` and the files' hashes in ``approved_code``).
    """

    model = models.ForeignKey(Model, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    state = models.CharField(
        max_length=16, choices=VersionState.choices, default=VersionState.UPLOADED
    )
    submitted_config_text = models.TextField(blank=True, default="")
    config_text = models.TextField(blank=True, default="")
    autocompleted_fields = models.JSONField(default=list, blank=True)
    backend = models.CharField(max_length=64, blank=True, default="")
    needs_approval = models.BooleanField(default=False)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_versions",
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    # The sha256 of every file the approver approved: {"files": {path: sha256}, "model_files":
    # {...}}. A version whose files no longer match may not be promoted or served.
    approved_code = models.JSONField(default=dict, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="uploaded_versions",
    )
    # Who uploaded the files of this version: its uploader, or for a config change the code's
    # uploaders carried over from the version it was derived from. None of them may approve it.
    code_uploaders = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="code_uploaded_versions"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    size = models.BigIntegerField(default=0)
    validation_steps = models.JSONField(default=list, blank=True)
    validation_error = models.TextField(blank=True, default="")
    validation_started_at = models.DateTimeField(null=True, blank=True)
    validated_at = models.DateTimeField(null=True, blank=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    gpu_check = models.CharField(
        max_length=8, choices=GpuCheck.choices, blank=True, default=GpuCheck.NOT_NEEDED
    )
    # Why the check is pending (the validating worker's devices), then the replica's outcome.
    gpu_check_message = models.TextField(blank=True, default="")
    gpu_checked_by = models.CharField(max_length=128, blank=True, default="")
    gpu_checked_at = models.DateTimeField(null=True, blank=True)
    # Set by import_repository: promote once validation passes, if still the highest version.
    promote_when_ready = models.BooleanField(default=False)
    # The version this one replaced when it was last promoted by hand: rollback walks this chain.
    previous_promoted = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["model__name", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["model", "number"], name="version_number_unique"),
            models.UniqueConstraint(
                fields=["model"],
                condition=models.Q(state=VersionState.PROMOTED),
                name="one_promoted_version_per_model",
            ),
            models.CheckConstraint(
                condition=models.Q(number__gte=1), name="version_number_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=VersionState.values), name="version_state_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(gpu_check__in=GpuCheck.values), name="version_gpu_check_valid"
            ),
        ]
        indexes = [models.Index(fields=["state"], name="version_state_idx")]

    def __str__(self) -> str:
        return f"{self.model.name} v{self.number} ({self.state})"

    @property
    def approved(self) -> bool:
        # approved_by is empty only for Portico's own demo code, approved as shipped.
        return self.approved_at is not None

    @property
    def is_terminal_for_validation(self) -> bool:
        return self.state not in (VersionState.UPLOADED, VersionState.VALIDATING)


class VersionFile(models.Model):
    """A file of a version, by its path relative to the version folder (or the model folder)."""

    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=512)
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="version_files")
    # Model-level files (labels, warmup data) sit beside config.pbtxt, not in a version.
    model_level = models.BooleanField(default=False)

    class Meta:
        ordering = ["model_level", "path"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "model_level", "path"], name="version_file_path_unique"
            ),
            models.CheckConstraint(
                condition=~models.Q(path__startswith="/")
                & ~models.Q(path__startswith="../")
                & ~models.Q(path__contains="/../")
                & ~models.Q(path__endswith="/..")
                & ~models.Q(path__in=["", ".."]),
                name="version_file_path_relative",
            ),
        ]

    def __str__(self) -> str:
        return self.path
