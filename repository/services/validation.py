"""Validation entry points: run by the worker, or re-queued by a user or a sweep."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from repository.errors import InvalidStateError
from repository.models import Event, ModelVersion, VersionState
from repository.services.events import event_record

logger = logging.getLogger(__name__)

# An upload whose validation has not started after this long lost its task.
UPLOADED_GRACE = timedelta(minutes=10)


def model_version_validate(*, version_id: int) -> ModelVersion | None:
    """Validate a version now (the Celery task calls this). Idempotent: a version that is already
    ready, failed, promoted or retired is left alone and None returned."""
    from repository.validation.pipeline import version_validate_run

    return version_validate_run(version_id)


def model_version_revalidate(*, version: ModelVersion, actor: Any) -> ModelVersion:
    """Send a failed version, or one whose validation was abandoned, through validation again."""
    from repository.validation.pipeline import validation_stale_after

    with transaction.atomic():
        version = (
            ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
        )
        stale = (
            version.state == VersionState.VALIDATING
            and version.validation_started_at is not None
            and version.validation_started_at + validation_stale_after() <= timezone.now()
        )
        if version.state not in (VersionState.FAILED, VersionState.UPLOADED) and not stale:
            raise InvalidStateError(
                version.model.name,
                version.number,
                state=version.state,
                action="revalidate",
                allowed=["failed", "uploaded", "validating (abandoned)"],
            )
        version.state = VersionState.UPLOADED
        version.validation_started_at = None
        version.save(update_fields=["state", "validation_started_at"])
        event_record(
            actor=actor,
            action=Event.Action.VALIDATION_STARTED,
            model=version.model,
            to_version=version.number,
            detail={"requeued": True},
        )
        enqueue_validation_on_commit(version.pk)
    return version


def model_versions_requeue_stale() -> list[int]:
    """Re-queue versions abandoned in ``validating`` (a worker died mid-run) and versions still
    ``uploaded`` long after their upload (their task was lost, e.g. the broker was down); returns
    their ids. Run when a worker starts; a duplicate task is a no-op."""
    from repository.validation.pipeline import validation_stale_after

    cutoff = timezone.now() - validation_stale_after()
    abandoned = Q(state=VersionState.VALIDATING, validation_started_at__lte=cutoff)
    lost = Q(state=VersionState.UPLOADED, created_at__lte=timezone.now() - UPLOADED_GRACE)
    ids = list(ModelVersion.objects.filter(abandoned | lost).values_list("pk", flat=True))
    for version_id in ids:
        enqueue_validation_on_commit(version_id)
    return ids


def enqueue_validation_on_commit(version_id: int) -> None:
    """Validate the version once the current transaction commits (never from inside it: the
    worker could otherwise look for a row it cannot see yet)."""
    transaction.on_commit(lambda: enqueue_validation(version_id))


def enqueue_validation(version_id: int) -> None:
    """Send the task; a broker failure is logged, not raised: the version is safely stored and
    the next worker start re-queues it."""
    from repository.tasks import validate_version

    try:
        validate_version.delay(version_id)
    except Exception:  # noqa: BLE001 - kombu raises many kinds of connection errors
        logger.exception("could not enqueue validation of version %s", version_id)
