"""Reading golden requests."""

from __future__ import annotations

from django.db.models import QuerySet

from repository.errors import GoldenRequestNotFoundError
from repository.models import GoldenRequest, Model


def golden_request_list(*, model: Model) -> QuerySet[GoldenRequest]:
    return GoldenRequest.objects.filter(model=model).select_related("recorded_from", "model")


def golden_request_get(*, model: Model, golden_id: int) -> GoldenRequest:
    golden = golden_request_list(model=model).filter(pk=golden_id).first()
    if golden is None:
        raise GoldenRequestNotFoundError(model.name, golden_id)
    return golden
