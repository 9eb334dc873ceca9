"""Output serializers shared by several API classes (input serializers live in their API class).

The version JSON is a contract (ARCHITECTURE.md): ``model``, ``version``, ``state``, ``approved``,
``config`` and ``validation.steps[{name, status, message, duration_ms}]`` must keep their names and
meaning; other fields may be added.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from repository.models import GoldenRequest, ModelVersion

STEP_KEYS = ("name", "status", "message", "duration_ms")


class ValidationStepSerializer(serializers.Serializer[dict[str, Any]]):
    """One validation step as the worker stored it."""

    name = serializers.CharField()
    status = serializers.CharField(help_text="passed, failed, skipped or running")
    message = serializers.CharField(allow_blank=True)
    duration_ms = serializers.FloatField(allow_null=True)


class ValidationSerializer(serializers.Serializer[ModelVersion]):
    """The validation report of a version: its steps, in order, as they ran."""

    steps = serializers.SerializerMethodField()
    error = serializers.CharField(source="validation_error")
    started_at = serializers.DateTimeField(source="validation_started_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="validated_at", allow_null=True)

    @extend_schema_field(ValidationStepSerializer(many=True))
    def get_steps(self, version: ModelVersion) -> list[dict[str, Any]]:
        steps = version.validation_steps if isinstance(version.validation_steps, list) else []
        return [_step(step) for step in steps if isinstance(step, dict)]


def _step(step: dict[str, Any]) -> dict[str, Any]:
    # Every key present even if a (partial) step row lacks one: clients index them blindly.
    shaped = {key: step.get(key) for key in STEP_KEYS}
    shaped["name"] = str(shaped["name"] or "")
    shaped["status"] = str(shaped["status"] or "")
    shaped["message"] = str(shaped["message"] or "")
    return shaped


class VersionFileSerializer(serializers.Serializer[Any]):
    """A file of a version, relative to the version folder (or the model folder)."""

    path = serializers.CharField()
    sha256 = serializers.CharField(source="blob_id")
    size = serializers.IntegerField(source="blob.size")
    model_level = serializers.BooleanField()


class GpuCheckSerializer(serializers.Serializer[ModelVersion]):
    """The GPU part of a version's check: left pending by a worker without a usable GPU, then
    what the first GPU replica to load the version found."""

    state = serializers.CharField(
        source="gpu_check", help_text='"" (nothing left to check), pending, passed or failed'
    )
    message = serializers.CharField(source="gpu_check_message")
    replica = serializers.CharField(source="gpu_checked_by")
    checked_at = serializers.DateTimeField(source="gpu_checked_at", allow_null=True)


class VersionSerializer(serializers.Serializer[ModelVersion]):
    """The version JSON (contract fields first)."""

    model = serializers.CharField(source="model.name")
    version = serializers.IntegerField(source="number")
    state = serializers.CharField()
    approved = serializers.BooleanField()
    config = serializers.SerializerMethodField(
        help_text="The effective config.pbtxt (validated, auto-completed); the submitted one "
        "until validation has produced it."
    )
    validation = ValidationSerializer(source="*")
    gpu_check = GpuCheckSerializer(source="*")
    needs_approval = serializers.BooleanField()
    approved_by = serializers.CharField(source="approved_by.username", allow_null=True)
    approved_at = serializers.DateTimeField(allow_null=True)
    approved_code = serializers.JSONField(
        help_text='The sha256 of every file approved: {"files": {path: sha256}, '
        '"model_files": {path: sha256}}; empty until approved.'
    )
    uploaded_by = serializers.CharField(source="uploaded_by.username", allow_null=True)
    code_uploaders = serializers.SerializerMethodField(
        help_text="Who uploaded this version's files (through config changes too): none of "
        "them may approve it."
    )
    created_at = serializers.DateTimeField()
    promoted_at = serializers.DateTimeField(allow_null=True)
    backend = serializers.CharField()
    size = serializers.IntegerField()
    submitted_config = serializers.CharField(source="submitted_config_text")
    autocompleted_fields = serializers.ListField(child=serializers.CharField())

    def get_config(self, version: ModelVersion) -> str:
        return version.config_text or version.submitted_config_text or ""

    def get_code_uploaders(self, version: ModelVersion) -> list[str]:
        return sorted(user.get_username() for user in version.code_uploaders.all())


class VersionDetailSerializer(VersionSerializer):
    """The version JSON with its files."""

    files = VersionFileSerializer(many=True, source="files.all")


class ModelSerializer(serializers.Serializer[Any]):
    """A model with its promoted version and how many live replicas serve it."""

    name = serializers.CharField()
    backend = serializers.CharField()
    platform = serializers.CharField()
    description = serializers.CharField()
    owner = serializers.CharField(source="owner.username", allow_null=True)
    created_at = serializers.DateTimeField()
    version_count = serializers.IntegerField()
    promoted_version = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField(
        help_text="The promoted version's state ('promoted'), or 'unpromoted' when none is."
    )
    live_replicas = serializers.SerializerMethodField(
        help_text="Live serving replicas that report the promoted version READY."
    )

    def get_promoted_version(self, model: Any) -> int | None:
        promoted = _promoted(model)
        return promoted.number if promoted is not None else None

    def get_state(self, model: Any) -> str:
        promoted = _promoted(model)
        return promoted.state if promoted is not None else "unpromoted"

    def get_live_replicas(self, model: Any) -> int:
        promoted = _promoted(model)
        if promoted is None:
            return 0
        ready: dict[tuple[str, int], int] = self.context.get("ready_replicas", {})
        return ready.get((model.name, promoted.number), 0)


def _promoted(model: Any) -> ModelVersion | None:
    promoted = getattr(model, "promoted_versions", None) or []
    return promoted[0] if promoted else None


class ModelDetailSerializer(ModelSerializer):
    """A model with its versions (newest first)."""

    versions = serializers.SerializerMethodField()

    @extend_schema_field(VersionSerializer(many=True))
    def get_versions(self, model: Any) -> list[dict[str, Any]]:
        return list(VersionSerializer(self.context.get("versions", []), many=True).data)


class GoldenRequestSerializer(serializers.Serializer[GoldenRequest]):
    """A golden request: inputs, the outputs recorded from a trusted version, its tolerance."""

    id = serializers.IntegerField()
    model = serializers.CharField(source="model.name")
    name = serializers.CharField()
    version = serializers.IntegerField(source="recorded_from.number", allow_null=True)
    state = serializers.CharField(help_text="recording, recorded or failed")
    error = serializers.CharField()
    inputs = serializers.JSONField()
    expected_outputs = serializers.JSONField()
    rtol = serializers.FloatField()
    atol = serializers.FloatField()
    last_results = serializers.JSONField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True)
    created_at = serializers.DateTimeField()
