"""Models: the list (with promoted version and live replicas) and one model with its versions."""

from __future__ import annotations

from collections import Counter

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.api.serializers import ModelDetailSerializer, ModelSerializer
from repository.selectors import (
    LIVE_REPLICA_MAX_AGE_S,
    model_get,
    model_list,
    model_version_list,
    replica_list,
    replica_ready_counts,
)

__all__ = ["LIVE_REPLICA_MAX_AGE_S", "ModelDetailApi", "ModelListApi", "ready_replica_counts"]


def ready_replica_counts() -> Counter[tuple[str, int]]:
    """How many live replicas report each (model, version) READY."""
    return replica_ready_counts(replicas=list(replica_list(max_age_s=LIVE_REPLICA_MAX_AGE_S)))


class ModelListApi(RoleApi):
    """Every model, with its promoted version and the live replicas serving it."""

    @extend_schema(responses=ModelSerializer(many=True), operation_id="models_list")
    def get(self, request: Request) -> Response:
        context = {"ready_replicas": ready_replica_counts()}
        return Response(ModelSerializer(model_list(), many=True, context=context).data)


class ModelDetailApi(RoleApi):
    """One model with all of its versions, newest first."""

    @extend_schema(responses=ModelDetailSerializer, operation_id="models_retrieve")
    def get(self, request: Request, name: str) -> Response:
        model = model_get(name=name)
        context = {
            "ready_replicas": ready_replica_counts(),
            "versions": model_version_list(model=model),
        }
        return Response(ModelDetailSerializer(model, context=context).data)
