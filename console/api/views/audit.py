"""The audit trail: every upload, validation, promote, rollback, approval and token change."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.api.pagination import ApiPagination
from repository.models import Event
from repository.selectors import event_list, user_get


class EventListApi(RoleApi):
    """Events newest first, filtered by ``model``, ``user`` and ``action``; paginated."""

    class EventFilterSerializer(serializers.Serializer[dict[str, Any]]):
        model = serializers.CharField(required=False, allow_blank=True)
        user = serializers.CharField(required=False, allow_blank=True)
        action = serializers.ChoiceField(
            choices=Event.Action.choices, required=False, allow_blank=True
        )

    class EventOutputSerializer(serializers.Serializer[Event]):
        id = serializers.IntegerField()
        created_at = serializers.DateTimeField()
        actor = serializers.CharField(source="actor_name")
        action = serializers.CharField()
        model = serializers.CharField(source="model_name")
        from_version = serializers.IntegerField(allow_null=True)
        to_version = serializers.IntegerField(allow_null=True)
        detail = serializers.JSONField()
        links = serializers.SerializerMethodField(
            help_text="API paths of what the event concerns: 'model' and 'version' when known."
        )

        def get_links(self, event: Event) -> dict[str, str]:
            links: dict[str, str] = {}
            if event.model_name and event.model_id is not None:
                links["model"] = reverse("api:model-detail", args=[event.model_name])
                if event.to_version is not None:
                    args = [event.model_name, event.to_version]
                    links["version"] = reverse("api:version-detail", args=args)
            return links

    @extend_schema(
        parameters=[EventFilterSerializer],
        responses=EventOutputSerializer(many=True),
        operation_id="events_list",
    )
    def get(self, request: Request) -> Response:
        filters = self.EventFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        events = self._events(filters.validated_data)
        paginator = ApiPagination()
        page = paginator.paginate_queryset(events, request, view=self)
        data = self.EventOutputSerializer(page, many=True).data
        return paginator.get_paginated_response(data)

    @staticmethod
    def _events(given: dict[str, Any]) -> Any:
        username = given.get("user")
        actor = None
        if username:
            actor = user_get(username=username, include_inactive=True)
            if actor is None:
                return event_list().none()
        return event_list(model=given.get("model") or None, actor=actor, action=given.get("action"))
