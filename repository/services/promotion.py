"""Moving versions into and out of service: promote, roll back. Approving is
``repository.services.approvals``."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from repository.errors import (
    ApprovalRequiredError,
    ApprovedCodeChangedError,
    NothingToRollBackError,
)
from repository.models import Event, Model, ModelVersion, VersionState
from repository.selectors.approvals import model_version_code_changes
from repository.selectors.lifecycle import PROMOTABLE_STATES, model_rollback_target
from repository.services.events import event_record
from repository.services.moves import version_lock, version_require_state
from repository.services.revision import serving_revision_bump


def model_version_promote(*, version: ModelVersion, actor: Any) -> ModelVersion:
    """Make ``version`` the one served by default; the previously promoted one becomes retired.

    Allowed from ready or retired. A version carrying Python code must be approved first, and
    its files must still be the ones approved.
    """
    with transaction.atomic():
        model, version = version_lock(version)
        version_require_state(version, PROMOTABLE_STATES, action="promote")
        if version.needs_approval and not version.approved:
            raise ApprovalRequiredError(model.name, version.number)
        _require_approved_code(version)
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
        target.model = model
        _require_approved_code(target)
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


def _require_approved_code(version: ModelVersion) -> None:
    changed = model_version_code_changes(version=version)
    if changed:
        raise ApprovedCodeChangedError(version.model.name, version.number, changed)


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
