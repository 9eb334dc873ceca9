"""What every API class shares: authentication from settings, role permission, error shape."""

from __future__ import annotations

from typing import ClassVar

from rest_framework.views import APIView

from console.api.permissions import HasRole


class RoleApi(APIView):
    """Base of every API class: ``required_roles`` maps an HTTP method to the role it needs
    (reads default to viewer)."""

    permission_classes = (HasRole,)
    required_roles: ClassVar[dict[str, str]] = {}
