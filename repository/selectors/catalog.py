"""Reading models and versions."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet

from repository.errors import ModelNotFoundError, VersionNotFoundError
from repository.models import Event, Model, ModelVersion, VersionState


def model_list(*, query: str = "", with_latest_event: bool = False) -> QuerySet[Model]:
    """Every model with its promoted version (``promoted_versions``: 0 or 1 items).

    ``query`` keeps models whose name, backend, platform, description or a version's backend
    contains it; ``with_latest_event`` adds ``recent_events`` (0 or 1 items, newest first).
    """
    promoted = ModelVersion.objects.filter(state=VersionState.PROMOTED).select_related(
        "approved_by", "uploaded_by"
    )
    models = (
        Model.objects.select_related("owner")
        .prefetch_related(Prefetch("versions", queryset=promoted, to_attr="promoted_versions"))
        .annotate(version_count=Count("versions", distinct=True))
        .order_by("name")
    )
    if with_latest_event:
        latest = Event.objects.order_by("-created_at", "-id")[:1]
        models = models.prefetch_related(
            Prefetch("events", queryset=latest, to_attr="recent_events")
        )
    if query:
        models = models.filter(_matching(query)).distinct()
    return models


def _matching(query: str) -> Q:
    return (
        Q(name__icontains=query)
        | Q(backend__icontains=query)
        | Q(platform__icontains=query)
        | Q(description__icontains=query)
        | Q(versions__backend__icontains=query)
    )


def model_get(*, name: str) -> Model:
    model = model_list().filter(name=name).first()
    if model is None:
        raise ModelNotFoundError(name)
    return model


def model_version_list(*, model: Model) -> QuerySet[ModelVersion]:
    """A model's versions, newest first, with their users, files, code uploaders and the
    version each replaced."""
    return (
        ModelVersion.objects.filter(model=model)
        .select_related("model", "approved_by", "uploaded_by", "previous_promoted")
        .prefetch_related("files__blob", "code_uploaders")
        .order_by("-number")
    )


def model_version_get(*, model: Model | str, number: int) -> ModelVersion:
    """A version by model (instance or name) and number; raises the matching NotFound error."""
    if isinstance(model, str):
        model = model_get(name=model)
    version = model_version_list(model=model).filter(number=number).first()
    if version is None:
        raise VersionNotFoundError(model.name, number)
    return version


def model_version_get_by_id(*, version_id: int) -> ModelVersion | None:
    """A version by its row id (what progress pages and WebSockets carry), or None."""
    return ModelVersion.objects.select_related("model").filter(pk=version_id).first()


def model_version_promoted(*, model: Model) -> ModelVersion | None:
    return model_version_list(model=model).filter(state=VersionState.PROMOTED).first()
