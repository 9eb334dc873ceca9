"""Role checks for API classes: each API names the role each HTTP method needs."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from console.permissions import ROLE_VIEWER, user_has_role

_READ_METHODS = ("GET", "HEAD", "OPTIONS")


class HasRole(BasePermission):
    """Allows a request whose effective role (user's, capped by the token's) reaches the role the
    view requires for the method: ``view.required_roles = {"POST": "deployer"}``; reads need
    ``viewer`` unless the view says otherwise."""

    message = "You do not have permission to perform this action."

    def has_permission(self, request: Request, view: Any) -> bool:
        roles: dict[str, str] = getattr(view, "required_roles", {})
        method = "GET" if request.method in _READ_METHODS else request.method
        required = roles.get(method or "GET", ROLE_VIEWER)
        if user_has_role(request.user, required, token=request.auth):
            return True
        self.message = f"This action needs the {required} role."
        return False
