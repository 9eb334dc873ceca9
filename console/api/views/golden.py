"""Golden requests of a model: list, record from a version, delete."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.api.serializers import GoldenRequestSerializer
from console.permissions import ROLE_DEPLOYER
from repository.models import GoldenState
from repository.selectors import (
    golden_request_get,
    golden_request_list,
    model_get,
    model_version_get,
    model_version_promoted,
)
from repository.services import golden_request_delete, golden_request_record


class GoldenRequestListApi(RoleApi):
    """GET: the model's golden requests. POST: record one by running its inputs on a version
    (deployer); 202 while it records in the background, 201 once recorded."""

    required_roles = {"POST": ROLE_DEPLOYER}

    class GoldenRecordInputSerializer(serializers.Serializer[dict[str, Any]]):
        name = serializers.CharField(max_length=128)
        inputs = serializers.ListField(
            child=serializers.DictField(), allow_empty=False, help_text="KServe v2 JSON inputs."
        )
        version = serializers.IntegerField(
            required=False, min_value=1, help_text="The trusted version (default: the promoted)."
        )
        rtol = serializers.FloatField(required=False, default=1e-5, min_value=0)
        atol = serializers.FloatField(required=False, default=1e-6, min_value=0)

    @extend_schema(responses=GoldenRequestSerializer(many=True), operation_id="golden_list")
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        return Response(GoldenRequestSerializer(golden_request_list(model=model), many=True).data)

    @extend_schema(
        request=GoldenRecordInputSerializer,
        responses={201: GoldenRequestSerializer, 202: GoldenRequestSerializer},
        operation_id="golden_record",
    )
    def post(self, request: Request, name: str) -> Response:
        given = self.GoldenRecordInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        model = model_get(name=name)
        version = _trusted_version(model, data.get("version"))
        golden = golden_request_record(
            model=model,
            name=data["name"],
            inputs=data["inputs"],
            version=version,
            rtol=data["rtol"],
            atol=data["atol"],
            actor=request.user,
        )
        golden = golden_request_get(model=model, golden_id=golden.pk)
        code = status.HTTP_202_ACCEPTED if golden.state == GoldenState.RECORDING else 201
        return Response(GoldenRequestSerializer(golden).data, status=code)


def _trusted_version(model: Any, number: int | None) -> Any:
    if number is not None:
        return model_version_get(model=model, number=number)
    promoted = model_version_promoted(model=model)
    if promoted is None:
        raise serializers.ValidationError(
            {"version": ["required: the model has no promoted version to record from."]}
        )
    return promoted


class GoldenRequestDetailApi(RoleApi):
    """GET: one golden request (poll its state while it records). DELETE: remove it (deployer)."""

    required_roles = {"DELETE": ROLE_DEPLOYER}

    @extend_schema(responses=GoldenRequestSerializer, operation_id="golden_retrieve")
    def get(self, request: Request, name: str, golden_id: int) -> Response:
        golden = golden_request_get(model=model_get(name=name), golden_id=golden_id)
        return Response(GoldenRequestSerializer(golden).data)

    @extend_schema(responses={204: None}, operation_id="golden_delete")
    def delete(self, request: Request, name: str, golden_id: int) -> Response:
        golden = golden_request_get(model=model_get(name=name), golden_id=golden_id)
        golden_request_delete(golden=golden, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
