"""Sample inputs' writes: upload (checked against the version's config) and delete, each recorded
in the audit log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from repository.models import Event, ModelVersion, SampleInput
from repository.services.events import event_record
from repository.tuning.sample_inputs import sample_inputs_read

MAX_NAME = 200


def sample_input_add(
    *, version: ModelVersion, actor: Any, files: Sequence[tuple[str, bytes]]
) -> SampleInput:
    """Keep the inputs ``files`` hold for load tests of ``version``."""
    inputs = sample_inputs_read(
        files,
        config_text=version.config_text,
        max_bytes=int(settings.PORTICO_SAMPLE_INPUT_MAX_BYTES),
    )
    name = ", ".join(file_name for file_name, _ in files)[:MAX_NAME]
    with transaction.atomic():
        sample = SampleInput.objects.create(
            version=version,
            name=name,
            inputs=inputs,
            size_bytes=sum(len(content) for _, content in files),
            created_by=actor if actor is not None and actor.pk else None,
        )
        _record(actor, Event.Action.SAMPLE_INPUT_ADD, sample)
    return sample


def sample_input_delete(*, sample: SampleInput, actor: Any) -> None:
    with transaction.atomic():
        _record(actor, Event.Action.SAMPLE_INPUT_DELETE, sample)
        sample.delete()


def _record(actor: Any, action: str, sample: SampleInput) -> None:
    event_record(
        actor=actor,
        action=action,
        model=sample.version.model,
        to_version=sample.version.number,
        detail={"id": sample.pk, "name": sample.name, "shape": sample.shape_summary},
    )
