"""Users and their roles (admins). Every change goes through the registry's ``user_role_set``
service, which records it in the audit log and refuses to leave the registry without an admin."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.permissions import ROLES, user_role
from console.views.access import ROLE_ADMIN, role_required
from console.views.feedback import report_outcome
from repository import selectors
from repository.services import user_role_set


@role_required(ROLE_ADMIN)
def user_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for user in selectors.user_list():
        role = user_role(user)
        rows.append({"user": user, "role": role, "settable": [r for r in ROLES if r != role]})
    return render(request, "console/user_list.html", {"nav": "users", "rows": rows})


@role_required(ROLE_ADMIN)
@require_POST
def user_role_update(request: HttpRequest, user_id: int) -> HttpResponse:
    user = selectors.user_get(user_id=user_id)
    if user is None:
        raise Http404(f"There is no active user {user_id}.")
    role = request.POST.get("role", "")
    if role not in ROLES:
        messages.error(request, f"'{role}' is not a role (viewer, deployer or admin).")
        return redirect("console:user-list")

    def set_role() -> str:
        user_role_set(user=user, role=role, actor=request.user)
        return f"{user.get_username()} is now {role}."

    report_outcome(request, set_role)
    return redirect("console:user-list")
