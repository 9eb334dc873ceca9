"""Re-validation and the sweep that picks up versions whose worker died mid-validation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from repository.errors import InvalidStateError
from repository.models import ModelVersion, VersionState
from repository.services import model_version_revalidate, model_versions_requeue_stale
from repository.validation.pipeline import ValidationBusyError, version_validate_run
from tests.factories import ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_failed_version_can_be_sent_through_validation_again(  # type: ignore[no-untyped-def]
    deployer, django_capture_on_commit_callbacks
) -> None:
    version = ModelVersionFactory(state=VersionState.FAILED)
    with django_capture_on_commit_callbacks() as callbacks:
        model_version_revalidate(version=version, actor=deployer)
    version.refresh_from_db()
    assert version.state == VersionState.UPLOADED
    assert len(callbacks) == 1


def test_ready_or_freshly_validating_versions_cannot_be_revalidated(deployer) -> None:  # type: ignore[no-untyped-def]
    for version in (
        ModelVersionFactory(state=VersionState.READY),
        ModelVersionFactory(state=VersionState.VALIDATING, validation_started_at=timezone.now()),
    ):
        with pytest.raises(InvalidStateError):
            model_version_revalidate(version=version, actor=deployer)


def test_a_run_in_progress_elsewhere_is_not_run_twice() -> None:
    version = ModelVersionFactory(
        state=VersionState.VALIDATING, validation_started_at=timezone.now()
    )
    with pytest.raises(ValidationBusyError) as info:
        version_validate_run(version.pk)
    assert info.value.retry_after_s > 0


def test_sweep_requeues_only_abandoned_validations(django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    stale = ModelVersionFactory(
        state=VersionState.VALIDATING, validation_started_at=timezone.now() - timedelta(days=1)
    )
    ModelVersionFactory(state=VersionState.VALIDATING, validation_started_at=timezone.now())
    ModelVersionFactory(state=VersionState.READY)
    ModelVersionFactory(state=VersionState.UPLOADED)  # its task is surely still queued
    lost = ModelVersionFactory(state=VersionState.UPLOADED)
    ModelVersion.objects.filter(pk=lost.pk).update(created_at=timezone.now() - timedelta(hours=1))
    with django_capture_on_commit_callbacks() as callbacks:
        assert sorted(model_versions_requeue_stale()) == sorted([stale.pk, lost.pk])
    assert len(callbacks) == 2
