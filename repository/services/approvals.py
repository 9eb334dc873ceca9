"""Approving code-bearing versions: a second person looks at the code before it can serve.

Each approval records who, when and the sha256 of every file approved, on the version
(``approved_by``, ``approved_at``, ``approved_code``) and in the audit log; promotion and the
serving facade refuse a version whose files no longer match.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from repository.errors import (
    ApprovalNotNeededError,
    CodeUploaderApprovalError,
    SelfApprovalError,
)
from repository.models import Event, ModelVersion, Role
from repository.selectors.approvals import model_version_code, user_may_approve
from repository.selectors.lifecycle import APPROVABLE_STATES
from repository.services.events import event_record
from repository.services.moves import version_lock, version_require_state
from repository.services.revision import serving_revision_bump
from repository.services.roles import user_role_require

# Where an approval came from, as the audit log records it.
SOURCE_REVIEW = "review"
SOURCE_IMPORT = "import"
SOURCE_DEMO = "demo"


def model_version_approve(
    *, version: ModelVersion, actor: Any, source: str = SOURCE_REVIEW
) -> ModelVersion:
    """Approve a code-bearing version, as ``actor``: an admin who uploaded none of its files.

    Refused for the version's uploader (SelfApprovalError) and for anyone who uploaded its code,
    also through config changes (CodeUploaderApprovalError). Approving again changes nothing.
    """
    user_role_require(user=actor, role=Role.ADMIN, action="approve")
    with transaction.atomic():
        model, version = version_lock(version)
        if not version.needs_approval:
            raise ApprovalNotNeededError(model.name, version.number)
        version_require_state(version, APPROVABLE_STATES, action="approve")
        if version.uploaded_by_id is not None and version.uploaded_by_id == actor.pk:
            raise SelfApprovalError(model.name, version.number, actor.get_username())
        if not user_may_approve(version=version, user=actor):
            raise CodeUploaderApprovalError(model.name, version.number, actor.get_username())
        if not version.approved:
            _approve(version, actor=actor, source=source)
    return version


def model_version_approve_demo(*, version: ModelVersion) -> ModelVersion:
    """Approve a demo model that Portico generated from its own source (``make run``'s first
    start), with no approver: nobody uploaded that code, and it is as trusted as the platform.
    Never reachable from the API, the console or a command's flags."""
    with transaction.atomic():
        _, version = version_lock(version)
        if version.needs_approval and not version.approved:
            _approve(version, actor=None, source=SOURCE_DEMO)
    return version


def _approve(version: ModelVersion, *, actor: Any, source: str) -> None:
    version.approved_by = actor
    version.approved_at = timezone.now()
    version.approved_code = model_version_code(version=version)
    version.save(update_fields=["approved_by", "approved_at", "approved_code"])
    event_record(
        actor=actor,
        action=Event.Action.APPROVE,
        model=version.model,
        to_version=version.number,
        detail={"source": source, **version.approved_code},
    )
    # Approval makes a ready code-bearing version loadable by serving.
    serving_revision_bump()
