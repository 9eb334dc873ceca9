"""Sample inputs of a version for its load tests, for scripts as the load-test page offers them:
list (viewers), upload (deployers: a multipart ``files`` field holding one KServe v2 JSON request
or one ``.npy`` per input, or a KServe v2 request as the JSON body) and delete (deployers)."""

from __future__ import annotations

from typing import Any

import orjson
from django.conf import settings
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.permissions import ROLE_DEPLOYER
from repository.selectors import model_get, model_version_get
from repository.tuning.errors import SampleInputNotFoundError
from repository.tuning.sample_inputs import SampleInputTooLargeError
from repository.tuning.samples import sample_input_add, sample_input_delete
from repository.tuning.selectors import sample_input_get, sample_input_list

# The name a JSON body is kept under, as if it had been uploaded as this file.
JSON_BODY_NAME = "request.json"


class SampleInputSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField(help_text="The uploaded file names.")
    shape = serializers.CharField(source="shape_summary", help_text="Each input's dtype and shape.")
    inputs = serializers.JSONField(help_text="KServe v2 JSON inputs: name, datatype, shape, data.")
    size_bytes = serializers.IntegerField()
    created_by = serializers.CharField(source="created_by.username", default=None)
    created_at = serializers.DateTimeField()


class SampleInputUploadSerializer(serializers.Serializer[Any]):
    files = serializers.ListField(
        child=serializers.FileField(),
        help_text="One .json file (a KServe v2 request) or one .npy per input, named after it.",
    )


def _version(name: str, number: int) -> Any:
    return model_version_get(model=model_get(name=name), number=number)


class SampleInputListApi(RoleApi):
    """GET: the version's sample inputs. POST: keep new ones (deployer), checked against the
    version's config; 201 with what was kept, 400 ``invalid_sample_input`` naming what is wrong."""

    required_roles = {"POST": ROLE_DEPLOYER}
    parser_classes = (MultiPartParser, JSONParser)

    @extend_schema(responses=SampleInputSerializer(many=True), operation_id="sample_input_list")
    def get(self, request: Request, name: str, version: int) -> Response:
        samples = sample_input_list(version=_version(name, version))
        return Response(SampleInputSerializer(samples, many=True).data)

    @extend_schema(
        request={
            "multipart/form-data": SampleInputUploadSerializer,
            "application/json": {"type": "object", "description": "A KServe v2 request."},
        },
        responses={201: SampleInputSerializer},
        operation_id="sample_input_add",
        examples=[
            OpenApiExample(
                "KServe v2 request",
                request_only=True,
                media_type="application/json",
                value={
                    "inputs": [
                        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [0.5, 1.5]}
                    ]
                },
            )  # fmt: skip
        ],
    )
    def post(self, request: Request, name: str, version: int) -> Response:
        target = _version(name, version)
        files = _uploaded_files(request)
        sample = sample_input_add(version=target, actor=request.user, files=files)
        return Response(SampleInputSerializer(sample).data, status=status.HTTP_201_CREATED)


class SampleInputDetailApi(RoleApi):
    """GET: one sample input. DELETE: forget it (deployer); load tests then fall back to the
    next source of inputs (other sample inputs, golden requests, zeros)."""

    required_roles = {"DELETE": ROLE_DEPLOYER}

    @extend_schema(responses=SampleInputSerializer, operation_id="sample_input_get")
    def get(self, request: Request, name: str, version: int, sample_id: int) -> Response:
        return Response(SampleInputSerializer(_sample(name, version, sample_id)).data)

    @extend_schema(responses={204: None}, operation_id="sample_input_delete")
    def delete(self, request: Request, name: str, version: int, sample_id: int) -> Response:
        sample_input_delete(sample=_sample(name, version, sample_id), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _sample(name: str, version: int, sample_id: int) -> Any:
    sample = sample_input_get(version=_version(name, version), sample_id=sample_id)
    if sample is None:
        raise SampleInputNotFoundError(name, version, sample_id)
    return sample


def _uploaded_files(request: Request) -> list[tuple[str, bytes]]:
    """The upload as (file name, bytes) pairs; a JSON body counts as one ``.json`` file. The size
    cap is checked on the sizes the upload declares, before any file is read into memory."""
    limit = int(settings.PORTICO_SAMPLE_INPUT_MAX_BYTES)
    if request.content_type.startswith("application/json"):
        content = orjson.dumps(request.data)
        if len(content) > limit:
            raise SampleInputTooLargeError(
                f"the request holds {len(content)} bytes; sample inputs may hold at most {limit}"
            )
        return [(JSON_BODY_NAME, content)]
    files = request.FILES.getlist("files")
    declared = sum(f.size or 0 for f in files)
    if declared > limit:
        raise SampleInputTooLargeError(
            f"the upload holds {declared} bytes; sample inputs may hold at most {limit}"
        )
    return [(f.name or "", f.read()) for f in files]
