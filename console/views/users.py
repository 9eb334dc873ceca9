"""Users and their roles (admins). Roles are the registry's role groups; granting goes through
its ``user_role_grant`` service. Lowering a role has no registry service yet (Django admin does)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.permissions import ROLES, role_rank, user_role
from console.views.access import ROLE_ADMIN, role_required
from repository.services import user_role_grant


@role_required(ROLE_ADMIN)
def user_list(request: HttpRequest) -> HttpResponse:
    users = get_user_model().objects.filter(is_active=True).prefetch_related("groups")
    rows = []
    for user in users.order_by("username"):
        role = user_role(user)
        rows.append(
            {
                "user": user,
                "role": role,
                "grantable": [r for r in ROLES if role_rank(r) > role_rank(role)],
            }
        )
    return render(request, "console/user_list.html", {"nav": "users", "rows": rows})


@role_required(ROLE_ADMIN)
@require_POST
def user_role_update(request: HttpRequest, user_id: int) -> HttpResponse:
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        raise Http404(f"There is no active user {user_id}.")
    role = request.POST.get("role", "")
    if role not in ROLES:
        messages.error(request, f"'{role}' is not a role (viewer, deployer or admin).")
    else:
        user_role_grant(user=user, role=role)
        messages.success(request, f"{user.get_username()} is now {user_role(user)}.")
    return redirect("console:user-list")
