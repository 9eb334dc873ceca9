"""Promote, roll back, approve. GET shows a confirmation that says exactly what will change;
POST (CSRF-protected) calls the registry service and returns to the model page with a message.

The services are idempotent where it matters and refuse illegal moves with a named error; that
error's message is what the user reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from console.views import reads
from console.views.access import ROLE_ADMIN, ROLE_DEPLOYER, role_required
from console.views.feedback import report_outcome
from repository.services import model_rollback as rollback_service
from repository.services import model_version_approve, model_version_promote


def _confirm_or_run(
    request: HttpRequest, *, model: Any, context: dict[str, Any], run: Callable[[], str]
) -> HttpResponse:
    model_url = reverse("console:model-detail", args=[model.name])
    if request.method != "POST":
        return render(
            request,
            "console/action_confirm.html",
            {"nav": "models", "model": model, "cancel_url": model_url, **context},
        )
    report_outcome(request, run)
    return redirect(model_url)


@role_required(ROLE_DEPLOYER)
def version_promote(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = reads.version_get(name=name, number=number)
    current = reads.promoted_version(model=version.model)
    changes = [
        f"{name} v{number} becomes the promoted version: requests that name no version "
        "go to it on every serving replica."
    ]
    if current is not None and current.pk != version.pk:
        changes.append(
            f"v{current.number}, promoted now, becomes retired; “Roll back” would return to it."
        )
    elif current is None:
        changes.append(f"{name} has no promoted version yet; it starts being served.")
    changes.append(
        "Replicas load and warm it next to the current one, then switch; no request is dropped."
    )

    def run() -> str:
        promoted = model_version_promote(version=version, actor=request.user)
        return f"{name} v{promoted.number} is promoted. Replicas are switching over below."

    return _confirm_or_run(
        request,
        model=version.model,
        run=run,
        context={
            "title": f"Promote {name} v{number}?",
            "changes": changes,
            "button": "Promote",
            "action_url": request.path,
            "version": version,
            "already": current is not None and current.pk == version.pk,
        },
    )


@role_required(ROLE_DEPLOYER)
def model_rollback(request: HttpRequest, name: str) -> HttpResponse:
    model = reads.model_get(name=name)
    current = reads.promoted_version(model=model)
    target = reads.rollback_target(promoted=current)
    if current is None or target is None:
        changes = [
            f"{name} has no earlier promoted version to roll back to, so nothing would change."
        ]
    else:
        changes = [
            f"v{target.number} becomes the promoted version again.",
            f"v{current.number}, promoted now, becomes retired.",
            f"Replicas switch back once v{target.number} is loaded; no request is dropped.",
        ]

    def run() -> str:
        restored = rollback_service(model=model, actor=request.user)
        return f"Rolled back: {name} v{restored.number} is promoted again."

    return _confirm_or_run(
        request,
        model=model,
        run=run,
        context={
            "title": f"Roll back {name}?",
            "changes": changes,
            "button": "Roll back",
            "action_url": request.path,
            "danger": True,
        },
    )


@role_required(ROLE_ADMIN)
def version_approve(request: HttpRequest, name: str, number: int) -> HttpResponse:
    version = reads.version_get(name=name, number=number)
    uploader = version.uploaded_by.get_username() if version.uploaded_by else "an unknown user"
    changes = [
        f"{name} v{number} carries Python code uploaded by {uploader}; approving it records you "
        "as the person who reviewed that code.",
        "Once approved and ready, deployers can promote it. Approving does not promote it.",
    ]

    def run() -> str:
        model_version_approve(version=version, actor=request.user)
        return f"{name} v{number} is approved."

    return _confirm_or_run(
        request,
        model=version.model,
        run=run,
        context={
            "title": f"Approve {name} v{number}?",
            "changes": changes,
            "button": "Approve",
            "action_url": request.path,
            "version": version,
        },
    )
