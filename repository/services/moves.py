"""The steps every state move of a version shares: lock its rows in one order, check its state."""

from __future__ import annotations

from repository.errors import InvalidStateError
from repository.models import Model, ModelVersion, VersionState


def version_lock(version: ModelVersion) -> tuple[Model, ModelVersion]:
    """The version's model row and a fresh copy of the version row, both locked."""
    # NOTE: lock order is model row, then version rows, in every service.
    model = Model.objects.select_for_update().get(pk=version.model_id)
    fresh = ModelVersion.objects.select_for_update().get(pk=version.pk)
    fresh.model = model
    return model, fresh


def version_require_state(
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
