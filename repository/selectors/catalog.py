"""Reading models and versions."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet

from repository.errors import ModelNotFoundError, VersionNotFoundError
from repository.models import Model, ModelVersion, VersionState


def model_list() -> QuerySet[Model]:
    """Every model with its promoted version (``promoted_versions``: 0 or 1 items)."""
    promoted = ModelVersion.objects.filter(state=VersionState.PROMOTED).select_related(
        "approved_by", "uploaded_by"
    )
    return (
        Model.objects.select_related("owner")
        .prefetch_related(Prefetch("versions", queryset=promoted, to_attr="promoted_versions"))
        .annotate(version_count=Count("versions", distinct=True))
        .order_by("name")
    )


def model_get(*, name: str) -> Model:
    model = model_list().filter(name=name).first()
    if model is None:
        raise ModelNotFoundError(name)
    return model


def model_version_list(*, model: Model) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.filter(model=model)
        .select_related("model", "approved_by", "uploaded_by")
        .order_by("-number")
    )


def model_version_get(*, model: Model | str, number: int) -> ModelVersion:
    """A version by model (instance or name) and number; raises the matching NotFound error."""
    if isinstance(model, str):
        model = model_get(name=model)
    version = (
        ModelVersion.objects.select_related("model", "approved_by", "uploaded_by")
        .prefetch_related("files__blob")
        .filter(model=model, number=number)
        .first()
    )
    if version is None:
        raise VersionNotFoundError(model.name, number)
    return version


def model_version_promoted(*, model: Model) -> ModelVersion | None:
    return model_version_list(model=model).filter(state=VersionState.PROMOTED).first()
