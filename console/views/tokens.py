"""API tokens (admins): create (the key is shown once, on the response page), list, revoke."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.forms import TokenCreateForm
from console.views import reads
from console.views.access import ROLE_ADMIN, role_required
from console.views.feedback import report_outcome
from repository.errors import RegistryError
from repository.selectors import user_get
from repository.services.tokens import api_token_create, api_token_revoke


@role_required(ROLE_ADMIN)
def token_list(request: HttpRequest) -> HttpResponse:
    created = None
    form = TokenCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        username = form.cleaned_data["username"].strip()
        user = request.user
        if username:
            user = user_get(username=username, include_inactive=True)
        if user is None:
            form.add_error("username", f"There is no user named '{username}'.")
        else:
            created = _create(request, form, user)
            if created is not None:
                form = TokenCreateForm()
    return render(
        request,
        "console/token_list.html",
        {
            "nav": "tokens",
            "tokens": reads.token_list(),
            "form": form,
            "created": created,
        },
        status=400 if request.method == "POST" and created is None else 200,
    )


def _create(request: HttpRequest, form: TokenCreateForm, user: Any) -> dict[str, Any] | None:
    try:
        data = form.cleaned_data
        token, key = api_token_create(
            user=user,
            role=data["role"],
            name=data["name"],
            actor=request.user,
            models=data["models"],
            expires_days=data["expires_days"],
            rate_limit_rps=data["rate_limit_rps"],
            max_concurrency=data["max_concurrency"],
        )
    except RegistryError as error:
        form.add_error("role", error.message)
        return None
    # NOTE: rendered, not redirected: the key must never be stored to survive a redirect.
    return {"token": token, "key": key}


@role_required(ROLE_ADMIN)
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = reads.token_get(token_id=token_id)

    def revoke() -> str:
        revoked = api_token_revoke(token=token, actor=request.user)
        return (
            f"Token {revoked.prefix}… ({revoked.name or 'unnamed'}) is revoked; "
            "requests using it are refused from now on."
        )

    report_outcome(request, revoke)
    return redirect("console:token-list")
