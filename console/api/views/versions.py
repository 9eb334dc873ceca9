"""Versions: list, upload, one version, and the moves between states (promote, approve,
revalidate, roll back, config change). Each move answers with the version JSON."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.api.fields import ConfigTextField
from console.api.serializers import VersionDetailSerializer, VersionSerializer
from console.permissions import ROLE_ADMIN, ROLE_DEPLOYER
from repository.errors import InvalidStateError
from repository.models import ModelVersion, VersionState
from repository.selectors import (
    model_get,
    model_version_get,
    model_version_list,
)
from repository.services import (
    model_rollback,
    model_version_approve,
    model_version_create_from_upload,
    model_version_create_with_config,
    model_version_gpu_check_record,
    model_version_promote,
    model_version_revalidate,
)

UPLOAD_KINDS = ("archive", "file", "files")

AcceptedSerializer = inline_serializer(
    name="VersionAccepted",
    fields={
        "model": serializers.CharField(),
        "version": serializers.IntegerField(),
        "state": serializers.CharField(),
        "url": serializers.CharField(),
    },
)


def accepted(request: Request, version: ModelVersion) -> Response:
    """202 ``{"model", "version", "state"}`` (plus where to watch it) for a version just created."""
    url = request.build_absolute_uri(
        reverse("api:version-detail", args=[version.model.name, version.number])
    )
    body = {
        "model": version.model.name,
        "version": version.number,
        "state": version.state,
        "url": url,
    }
    return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Location": url})


def version_json(*, name: str, number: int, detail: bool = False) -> dict[str, Any]:
    """The version JSON, re-read so it shows the committed state."""
    version = model_version_get(model=name, number=number)
    version = model_version_gpu_check_record(version=version)
    serializer = VersionDetailSerializer if detail else VersionSerializer
    return dict(serializer(version).data)


class ModelVersionListApi(RoleApi):
    """GET: a model's versions, newest first. POST: upload a new version (deployer)."""

    parser_classes = (MultiPartParser, FormParser)
    required_roles = {"POST": ROLE_DEPLOYER}

    class UploadInputSerializer(serializers.Serializer[dict[str, Any]]):
        archive = serializers.FileField(
            required=False, help_text="A .zip or .tar.gz of a Triton model folder."
        )
        file = serializers.FileField(required=False, help_text="One model file, its name kept.")
        files = serializers.ListField(
            child=serializers.FileField(),
            required=False,
            allow_empty=False,
            help_text="Separate files of a Triton model folder (repeat the field).",
        )
        paths = serializers.ListField(
            child=serializers.CharField(max_length=512),
            required=False,
            help_text="The relative path of each of 'files', in order (default: its file name).",
        )
        config = ConfigTextField(help_text="config.pbtxt text (optional).")
        description = serializers.CharField(required=False, allow_blank=True, max_length=4000)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            given = [key for key in UPLOAD_KINDS if attrs.get(key)]
            if len(given) != 1:
                raise serializers.ValidationError(
                    {"archive": ["send exactly one of 'archive', 'file' or 'files'."]}
                )
            paths = attrs.get("paths")
            if paths is not None and len(paths) != len(attrs.get("files") or []):
                raise serializers.ValidationError(
                    {"paths": ["give one path for each of 'files', in the same order."]}
                )
            return attrs

    @extend_schema(responses=VersionSerializer(many=True), operation_id="versions_list")
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        return Response(VersionSerializer(model_version_list(model=model), many=True).data)

    @extend_schema(
        request={"multipart/form-data": UploadInputSerializer},
        responses={202: AcceptedSerializer},
        operation_id="versions_upload",
    )
    def post(self, request: Request, name: str) -> Response:
        given = self.UploadInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        archive, file = data.get("archive"), data.get("file")
        version = model_version_create_from_upload(
            model_name=name,
            uploaded_by=request.user,
            archive=archive,
            archive_name=archive.name if archive is not None else "",
            file=file,
            file_name=file.name if file is not None else "",
            files=_named_files(data.get("files"), data.get("paths")),
            config_text=data.get("config") or None,
            description=data.get("description", ""),
        )
        return accepted(request, version)


def _named_files(files: list[Any] | None, paths: list[str] | None) -> list[tuple[str, Any]] | None:
    # NOTE: Django keeps only the base name of an uploaded file, so folders travel in 'paths'.
    if not files:
        return None
    return list(zip(paths or [f.name for f in files], files, strict=True))


class ModelVersionDetailApi(RoleApi):
    """One version: state, approval, effective config, validation steps, files."""

    @extend_schema(responses=VersionDetailSerializer, operation_id="versions_retrieve")
    def get(self, request: Request, name: str, version: int) -> Response:
        return Response(version_json(name=name, number=version, detail=True))


class ModelVersionPromoteApi(RoleApi):
    """Make this version the one served by default (deployer). Promoting the version that is
    already promoted answers 200 with its JSON, so a double submit is harmless."""

    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(request=None, responses=VersionSerializer, operation_id="versions_promote")
    def post(self, request: Request, name: str, version: int) -> Response:
        target = model_version_get(model=name, number=version)
        try:
            model_version_promote(version=target, actor=request.user)
        except InvalidStateError as error:
            if error.extra.get("state") != VersionState.PROMOTED:
                raise
        return Response(version_json(name=name, number=version))


class ModelVersionApproveApi(RoleApi):
    """Approve a version that carries Python code (admin, not its uploader). Idempotent."""

    required_roles = {"POST": ROLE_ADMIN}

    @extend_schema(request=None, responses=VersionSerializer, operation_id="versions_approve")
    def post(self, request: Request, name: str, version: int) -> Response:
        target = model_version_get(model=name, number=version)
        model_version_approve(version=target, actor=request.user)
        return Response(version_json(name=name, number=version))


class ModelVersionRevalidateApi(RoleApi):
    """Send a failed (or abandoned) version through validation again (deployer)."""

    required_roles = {"POST": ROLE_DEPLOYER}

    @extend_schema(
        request=None, responses={202: VersionSerializer}, operation_id="versions_revalidate"
    )
    def post(self, request: Request, name: str, version: int) -> Response:
        target = model_version_get(model=name, number=version)
        model_version_revalidate(version=target, actor=request.user)
        body = version_json(name=name, number=version)
        return Response(body, status=status.HTTP_202_ACCEPTED)


class ModelVersionConfigApi(RoleApi):
    """A config change: a new version with this config that reuses the version's files
    (deployer). Answers 202 like an upload."""

    parser_classes = (JSONParser, MultiPartParser, FormParser)
    required_roles = {"POST": ROLE_DEPLOYER}

    class ConfigChangeInputSerializer(serializers.Serializer[dict[str, Any]]):
        config = ConfigTextField(required=True, allow_blank=False)

    @extend_schema(
        request=ConfigChangeInputSerializer,
        responses={202: AcceptedSerializer},
        operation_id="versions_config",
    )
    def post(self, request: Request, name: str, version: int) -> Response:
        given = self.ConfigChangeInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        source = model_version_get(model=name, number=version)
        new = model_version_create_with_config(
            version=source, config_text=given.validated_data["config"], uploaded_by=request.user
        )
        return accepted(request, new)


class ModelRollbackApi(RoleApi):
    """Re-promote the version promoted before the current one (deployer); answers with the
    version now promoted. With ``from_version``, a repeat is harmless: once that version is no
    longer the promoted one, the answer is the version promoted now and nothing moves."""

    parser_classes = (JSONParser, MultiPartParser, FormParser)
    required_roles = {"POST": ROLE_DEPLOYER}

    class RollbackInputSerializer(serializers.Serializer[dict[str, Any]]):
        from_version = serializers.IntegerField(
            required=False, min_value=1, help_text="Roll back only from this promoted version."
        )

    @extend_schema(
        request=RollbackInputSerializer, responses=VersionSerializer, operation_id="models_rollback"
    )
    def post(self, request: Request, name: str) -> Response:
        given = self.RollbackInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        model = model_get(name=name)
        from_version = given.validated_data.get("from_version")
        promoted = model_rollback(model=model, actor=request.user, from_version=from_version)
        return Response(version_json(name=name, number=promoted.number))
