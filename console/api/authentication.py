"""``Authorization: Token KEY`` authentication against the registry's hashed API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from repository.errors import TokenInvalidError
from repository.services import api_token_authenticate

# "Bearer" too, so the token a client already sends to the inference API also works here.
KEYWORDS = (b"token", b"bearer")


class TokenAuthentication(authentication.BaseAuthentication):
    """Authenticates ``Authorization: Token KEY``; ``request.auth`` is the token (its role caps
    the user's role). Missing header: not this scheme. Bad or revoked key: 401."""

    keyword = "Token"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected 'Token KEY'.")
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid token header: not ASCII.") from error
        try:
            token = api_token_authenticate(key=key)
        except TokenInvalidError as error:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.") from error
        return (token.user, token)

    def authenticate_header(self, request: Request) -> str:
        # NOTE: DRF answers 401 (not 403) to unauthenticated requests only when the first
        # authentication class names a scheme here; this class is listed first for that reason.
        return self.keyword


class TokenAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes the token scheme in the OpenAPI schema."""

    target_class = "console.api.authentication.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "API token as `Token KEY` (create one with `manage.py create_token`).",
        }
