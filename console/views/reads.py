"""The reads the pages need, through the registry's selectors (joins and rules live there).

What this module adds is presentation: the registry's NotFound errors (or a missing row) become
404 pages, and lists come back in the order a page shows them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import QuerySet
from django.http import Http404

from repository import selectors
from repository.errors import RegistryError
from repository.models import ApiToken, Event, GoldenRequest, Model, ModelVersion, ServingReplica
from repository.selectors import (
    LIVE_REPLICA_MAX_AGE_S,
    model_rollback_target,
    model_version_allowed_actions,
    model_versions_allowed_actions,
    replica_is_live,
)

__all__ = [
    "LIVE_REPLICA_AGE_S",
    "event_filter_choices",
    "event_list",
    "golden_get",
    "golden_list",
    "live_replicas",
    "model_get",
    "model_list",
    "model_versions",
    "promoted_version",
    "replica_is_live",
    "replica_list",
    "replicas_ready",
    "rollback_target",
    "token_get",
    "token_list",
    "version_actions",
    "version_by_id",
    "version_get",
    "versions_actions",
]

LIVE_REPLICA_AGE_S = LIVE_REPLICA_MAX_AGE_S
T = TypeVar("T")


def _or_404(read: Callable[[], T | None], missing: str = "") -> T:
    try:
        found = read()
    except RegistryError as error:  # the selectors' NotFound errors
        raise Http404(error.message) from error
    if found is None:
        raise Http404(missing)
    return found


def model_list(*, query: str = "") -> QuerySet[Model]:
    """Models with their promoted version and (``recent_events``) their latest event."""
    return selectors.model_list(query=query, with_latest_event=True)


def model_get(*, name: str) -> Model:
    return _or_404(lambda: selectors.model_get(name=name))


def model_versions(*, model: Model) -> list[ModelVersion]:
    return list(selectors.model_version_list(model=model))


def promoted_version(*, model: Model) -> ModelVersion | None:
    return selectors.model_version_promoted(model=model)


def version_get(*, name: str, number: int) -> ModelVersion:
    return _or_404(lambda: selectors.model_version_get(model=name, number=number))


def version_by_id(*, version_id: int) -> ModelVersion:
    return _or_404(
        lambda: selectors.model_version_get_by_id(version_id=version_id),
        f"There is no version with id {version_id}.",
    )


def rollback_target(*, promoted: ModelVersion | None) -> ModelVersion | None:
    return model_rollback_target(promoted=promoted)


def version_actions(*, version: ModelVersion, user: Any) -> dict[str, bool]:
    return model_version_allowed_actions(version=version, user=user)


def versions_actions(*, versions: list[ModelVersion], user: Any) -> dict[int, dict[str, bool]]:
    return model_versions_allowed_actions(versions=versions, user=user)


def golden_list(*, model: Model) -> list[GoldenRequest]:
    return list(selectors.golden_request_list(model=model).order_by("name"))


def golden_get(*, model: Model, golden_id: int) -> GoldenRequest:
    return _or_404(lambda: selectors.golden_request_get(model=model, golden_id=golden_id))


def event_list(*, model: str = "", user: str = "", action: str = "") -> QuerySet[Event]:
    return selectors.event_list(model=model or None, actor_name=user, action=action or None)


def event_filter_choices() -> dict[str, list[str]]:
    return {
        "models": list(selectors.model_list().values_list("name", flat=True)),
        "users": selectors.event_actor_names(),
        "actions": [value for value, _ in Event.Action.choices],
    }


def token_list() -> QuerySet[ApiToken]:
    return selectors.api_token_list(include_revoked=True).order_by("revoked_at", "-created_at")


def token_get(*, token_id: int) -> ApiToken:
    return _or_404(
        lambda: selectors.api_token_get(token_id=token_id),
        f"There is no API token {token_id}.",
    )


def replica_list() -> list[ServingReplica]:
    return list(selectors.replica_list().order_by("-last_seen", "replica_id"))


def live_replicas() -> list[ServingReplica]:
    return list(selectors.replica_list(max_age_s=LIVE_REPLICA_MAX_AGE_S))


def replicas_ready(replicas: list[ServingReplica]) -> Counter[tuple[str, int]]:
    """How many of ``replicas`` have each (model, version) loaded and READY."""
    return selectors.replica_ready_counts(replicas=replicas)


def slos_by_model() -> dict[int, Any]:
    """Every SLO by model id, in one query (the models list shows each model's)."""
    from repository.tuning.selectors import slo_list

    return {slo.model_id: slo for slo in slo_list()}
