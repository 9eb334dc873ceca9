"""Role checks for the console pages: every view says the least role it needs.

The roles themselves (and how a user's role is worked out) live in ``console.permissions``, shared
with the management API, so a page and its API route can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

from console.permissions import ROLE_ADMIN, ROLE_DEPLOYER, ROLE_VIEWER, user_has_role, user_role

__all__ = ["ROLE_ADMIN", "ROLE_DEPLOYER", "ROLE_VIEWER", "role_required", "role_context"]

View = Callable[..., HttpResponse]


def role_required(role: str) -> Callable[[View], View]:
    """Anonymous users go to the sign-in page; signed-in users below ``role`` get a 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not user_has_role(request.user, role):
                raise PermissionDenied(f"This page needs the {role} role.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def role_context(request: HttpRequest) -> dict[str, Any]:
    """What templates need to hide actions a role cannot take (the server checks again)."""
    role = user_role(request.user)
    return {
        "role": role,
        "can_deploy": user_has_role(request.user, ROLE_DEPLOYER),
        "is_admin": user_has_role(request.user, ROLE_ADMIN),
    }
