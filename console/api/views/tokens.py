"""API tokens (admin): create (the key is shown once), list, revoke."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import RoleApi
from console.permissions import ROLE_ADMIN, ROLES
from repository.errors import TokenOutranksUserError, TokenSettingsError
from repository.models import ApiToken, Role
from repository.selectors import api_token_get, api_token_list, user_get
from repository.services import api_token_create, api_token_revoke
from repository.services.tokens import DEFAULT_EXPIRY_DAYS


class TokenSerializer(serializers.Serializer[ApiToken]):
    """A token as listed: never its key (only a hash is stored), its first characters instead."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    user = serializers.CharField(source="user.username")
    role = serializers.CharField()
    models = serializers.ListField(child=serializers.CharField(), source="model_names")
    rate_limit_rps = serializers.FloatField(allow_null=True)
    max_concurrency = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    last_used = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class CreatedTokenSerializer(TokenSerializer):
    """A token just created, with its key: shown this once."""

    key = serializers.CharField()


class TokenListApi(RoleApi):
    """GET: tokens (``?include_revoked=1`` for revoked ones too). POST: create one, for yourself
    or (viewer role only) for someone else; anything more answers 403 token_for_another_user."""

    required_roles = {"GET": ROLE_ADMIN, "POST": ROLE_ADMIN}

    class TokenFilterSerializer(serializers.Serializer[dict[str, Any]]):
        include_revoked = serializers.BooleanField(required=False, default=False)

    class TokenCreateInputSerializer(serializers.Serializer[dict[str, Any]]):
        name = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
        role = serializers.ChoiceField(choices=[*ROLES, Role.INVOKER.value])
        user = serializers.CharField(
            required=False,
            help_text="Username the token acts as (default: yourself); a token for someone "
            "else may only carry the viewer role.",
        )
        models = serializers.ListField(
            child=serializers.CharField(max_length=128), required=False, default=list,
            help_text="Invoker tokens: the models it may call ('*': every model).",
        )  # fmt: skip
        expires_days = serializers.IntegerField(required=False, default=DEFAULT_EXPIRY_DAYS)
        rate_limit_rps = serializers.FloatField(required=False, allow_null=True, default=None)
        max_concurrency = serializers.IntegerField(required=False, allow_null=True, default=None)

    @extend_schema(
        parameters=[TokenFilterSerializer],
        responses=TokenSerializer(many=True),
        operation_id="tokens_list",
    )
    def get(self, request: Request) -> Response:
        filters = self.TokenFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        tokens = api_token_list(include_revoked=filters.validated_data["include_revoked"])
        return Response(TokenSerializer(tokens, many=True).data)

    @extend_schema(
        request=TokenCreateInputSerializer,
        responses={201: CreatedTokenSerializer},
        operation_id="tokens_create",
    )
    def post(self, request: Request) -> Response:
        given = self.TokenCreateInputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        owner = _token_owner(request, data.get("user"))
        try:
            token, key = api_token_create(
                user=owner, role=data["role"], name=data["name"], actor=request.user,
                models=data["models"], expires_days=data["expires_days"],
                rate_limit_rps=data["rate_limit_rps"], max_concurrency=data["max_concurrency"],
            )  # fmt: skip
        except TokenOutranksUserError as error:
            raise serializers.ValidationError({"role": [error.message]}) from error
        except TokenSettingsError as error:
            raise serializers.ValidationError({"settings": error.extra["problems"]}) from error
        body = dict(TokenSerializer(token).data)
        body["key"] = key
        return Response(body, status=status.HTTP_201_CREATED)


def _token_owner(request: Request, username: str | None) -> Any:
    if not username:
        return request.user
    owner = user_get(username=username)
    if owner is None:
        raise serializers.ValidationError({"user": [f"no active user '{username}'."]})
    return owner


class TokenDetailApi(RoleApi):
    """DELETE: revoke a token (idempotent)."""

    required_roles = {"GET": ROLE_ADMIN, "DELETE": ROLE_ADMIN}

    @extend_schema(responses=TokenSerializer, operation_id="tokens_retrieve")
    def get(self, request: Request, token_id: int) -> Response:
        return Response(TokenSerializer(_token(token_id)).data)

    @extend_schema(responses={204: None}, operation_id="tokens_revoke")
    def delete(self, request: Request, token_id: int) -> Response:
        api_token_revoke(token=_token(token_id), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _token(token_id: int) -> ApiToken:
    token = api_token_get(token_id=token_id)
    if token is None:
        raise NotFound(f"no API token {token_id}.")
    return token
