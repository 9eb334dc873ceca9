"""Moving versions into and out of service: promote, roll back, approve."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from repository.errors import (
    ApprovalNotNeededError,
    ApprovalRequiredError,
    InvalidStateError,
    NothingToRollBackError,
    SelfApprovalError,
)
from repository.models import Event, Model, ModelVersion, Role, VersionState
from repository.selectors.lifecycle import (
    APPROVABLE_STATES,
    PROMOTABLE_STATES,
    model_rollback_target,
)
from repository.services.events import event_record
from repository.services.revision import serving_revision_bump
from repository.services.roles import user_role_require


def model_version_promote(*, version: ModelVersion, actor: Any) -> ModelVersion:
    """Make ``version`` the one served by default; the previously promoted one becomes retired.

    Allowed from ready or retired. A version carrying Python code must be approved first.
    """
    with transaction.atomic():
        model, version = _lock(version)
        _require_state(version, PROMOTABLE_STATES, action="promote")
        if version.needs_approval and not version.approved:
            raise ApprovalRequiredError(model.name, version.number)
        current = _promoted(model)
        if current is not None:
            _retire(current)
        version.previous_promoted = current
        _promote(version)
        event_record(
            actor=actor,
            action=Event.Action.PROMOTE,
            model=model,
            from_version=current.number if current else None,
            to_version=version.number,
        )
        serving_revision_bump()
    return version


def model_rollback(*, model: Model, actor: Any, from_version: int | None = None) -> ModelVersion:
    """Re-promote the version promoted before the current one; the current one becomes retired.

    Repeated rollbacks walk further back along the promotion history. With ``from_version``, a
    repeated request is harmless: once that version is no longer the promoted one, nothing moves
    and the version promoted now is returned (checked under the model's lock).
    """
    with transaction.atomic():
        model = Model.objects.select_for_update().get(pk=model.pk)
        current = _promoted(model)
        if from_version is not None and current is not None and current.number != from_version:
            return current
        target = model_rollback_target(promoted=current)
        if current is None or target is None:
            raise NothingToRollBackError(model.name, current.number if current else None)
        target = ModelVersion.objects.select_for_update().get(pk=target.pk)
        _retire(current)
        # NOTE: previous_promoted of the target is kept, so the next rollback goes further back.
        _promote(target)
        event_record(
            actor=actor,
            action=Event.Action.ROLLBACK,
            model=model,
            from_version=current.number,
            to_version=target.number,
        )
        serving_revision_bump()
    return target


def model_version_approve(*, version: ModelVersion, actor: Any) -> ModelVersion:
    """Approve a code-bearing version: by an admin who is not its uploader."""
    user_role_require(user=actor, role=Role.ADMIN, action="approve")
    with transaction.atomic():
        model, version = _lock(version)
        if not version.needs_approval:
            raise ApprovalNotNeededError(model.name, version.number)
        _require_state(version, APPROVABLE_STATES, action="approve")
        if version.uploaded_by_id is not None and version.uploaded_by_id == actor.pk:
            raise SelfApprovalError(model.name, version.number, actor.get_username())
        if version.approved:
            return version
        version.approved_by = actor
        version.approved_at = timezone.now()
        version.save(update_fields=["approved_by", "approved_at"])
        event_record(
            actor=actor, action=Event.Action.APPROVE, model=model, to_version=version.number
        )
        # Approval makes a ready code-bearing version loadable by serving.
        serving_revision_bump()
    return version


def _lock(version: ModelVersion) -> tuple[Model, ModelVersion]:
    # NOTE: lock order is model row, then version rows, in every service.
    model = Model.objects.select_for_update().get(pk=version.model_id)
    fresh = ModelVersion.objects.select_for_update().get(pk=version.pk)
    fresh.model = model
    return model, fresh


def _require_state(
    version: ModelVersion, allowed: tuple[VersionState, ...], *, action: str
) -> None:
    if version.state not in allowed:
        raise InvalidStateError(
            version.model.name,
            version.number,
            state=version.state,
            action=action,
            allowed=[s.value for s in allowed],
        )


def _promoted(model: Model) -> ModelVersion | None:
    return (
        ModelVersion.objects.select_for_update()
        .filter(model=model, state=VersionState.PROMOTED)
        .first()
    )


def _retire(version: ModelVersion) -> None:
    version.state = VersionState.RETIRED
    version.save(update_fields=["state"])


def _promote(version: ModelVersion) -> None:
    version.state = VersionState.PROMOTED
    version.promoted_at = timezone.now()
    version.save(update_fields=["state", "promoted_at", "previous_promoted"])
