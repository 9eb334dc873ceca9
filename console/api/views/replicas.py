"""Serving replicas as their heartbeats describe them."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from repository.models import ServingReplica
from repository.selectors import LIVE_REPLICA_MAX_AGE_S, replica_is_live, replica_list


class ReplicaListApi(RoleApi):
    """Every replica that has reported: address, uptime, last heartbeat, loaded versions (with
    their state or load error). ``?live=1`` keeps only those heard from in the last 15 s."""

    class ReplicaFilterSerializer(serializers.Serializer[dict[str, Any]]):
        live = serializers.BooleanField(required=False, default=False)

    class ReplicaOutputSerializer(serializers.Serializer[ServingReplica]):
        replica_id = serializers.CharField()
        address = serializers.CharField()
        http_url = serializers.CharField()
        started_at = serializers.DateTimeField()
        last_seen = serializers.DateTimeField()
        uptime_s = serializers.SerializerMethodField()
        live = serializers.SerializerMethodField()
        versions = serializers.JSONField()
        last_error = serializers.CharField()

        def get_uptime_s(self, replica: ServingReplica) -> float:
            return max(0.0, (timezone.now() - replica.started_at).total_seconds())

        def get_live(self, replica: ServingReplica) -> bool:
            return replica_is_live(replica=replica)

    @extend_schema(
        parameters=[ReplicaFilterSerializer],
        responses=ReplicaOutputSerializer(many=True),
        operation_id="replicas_list",
    )
    def get(self, request: Request) -> Response:
        filters = self.ReplicaFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        max_age_s = LIVE_REPLICA_MAX_AGE_S if filters.validated_data["live"] else None
        replicas = replica_list(max_age_s=max_age_s)
        return Response(self.ReplicaOutputSerializer(replicas, many=True).data)
