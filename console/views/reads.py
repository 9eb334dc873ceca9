"""The reads the pages need, through the registry's selectors (joins already applied there).

The registry's NotFound errors become 404 pages here; what a page adds (the latest event per
model, which buttons a role sees) is display, not rules: the services check again on use.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from console.permissions import ROLE_ADMIN, ROLE_DEPLOYER, user_has_role
from repository.errors import RegistryError
from repository.models import (
    ApiToken,
    Event,
    GoldenRequest,
    Model,
    ModelVersion,
    ServingReplica,
    VersionState,
)
from repository.selectors import audit, catalog, golden, serving, tokens

LIVE_REPLICA_AGE_S = 15.0
PROMOTABLE = (VersionState.READY, VersionState.RETIRED)
APPROVABLE = (
    VersionState.UPLOADED,
    VersionState.VALIDATING,
    VersionState.READY,
    VersionState.RETIRED,
)
T = TypeVar("T")


def _or_404(read: Callable[[], T]) -> T:
    try:
        return read()
    except RegistryError as error:  # the selectors' NotFound errors
        raise Http404(error.message) from error


def model_list(*, query: str = "") -> QuerySet[Model]:
    """Models with their promoted version and (``recent_events``) their latest event."""
    models = catalog.model_list().prefetch_related(
        Prefetch(
            "events",
            queryset=Event.objects.order_by("-created_at", "-id")[:1],
            to_attr="recent_events",
        ),
    )
    if query:
        models = models.filter(
            Q(name__icontains=query)
            | Q(backend__icontains=query)
            | Q(platform__icontains=query)
            | Q(description__icontains=query)
            | Q(versions__backend__icontains=query)
        ).distinct()
    return models


def model_get(*, name: str) -> Model:
    return _or_404(lambda: catalog.model_get(name=name))


def model_versions(*, model: Model) -> list[ModelVersion]:
    return list(
        catalog.model_version_list(model=model)
        .select_related("previous_promoted")
        .prefetch_related("files__blob")
    )


def promoted_version(*, model: Model) -> ModelVersion | None:
    return catalog.model_version_promoted(model=model)


def version_get(*, name: str, number: int) -> ModelVersion:
    return _or_404(lambda: catalog.model_version_get(model=name, number=number))


def version_by_id(*, version_id: int) -> ModelVersion:
    version = ModelVersion.objects.select_related("model").filter(pk=version_id).first()
    if version is None:
        raise Http404(f"There is no version with id {version_id}.")
    return version


def rollback_target(*, promoted: ModelVersion | None) -> ModelVersion | None:
    """The version a rollback would re-promote (the one the registry's rollback walks to)."""
    target = promoted.previous_promoted if promoted is not None else None
    return target if target is not None and target.state == VersionState.RETIRED else None


def version_actions(*, version: ModelVersion, user: Any) -> dict[str, bool]:
    """Which buttons to show; the services check again (and say why) when they are used."""
    deployer = user_has_role(user, ROLE_DEPLOYER)
    admin = user_has_role(user, ROLE_ADMIN)
    approved_or_free = not version.needs_approval or version.approved
    return {
        "promote": deployer and version.state in PROMOTABLE and approved_or_free,
        "approve": admin
        and version.needs_approval
        and not version.approved
        and version.state in APPROVABLE
        and version.uploaded_by_id != user.pk,
        "awaits_approval": version.needs_approval and not version.approved,
    }


def golden_list(*, model: Model) -> list[GoldenRequest]:
    return list(golden.golden_request_list(model=model).order_by("name"))


def golden_get(*, model: Model, golden_id: int) -> GoldenRequest:
    return _or_404(lambda: golden.golden_request_get(model=model, golden_id=golden_id))


def event_list(*, model: str = "", user: str = "", action: str = "") -> QuerySet[Event]:
    events = audit.event_list(model=model or None, action=action or None)
    # Filtered by the recorded name, so events of since-deleted users and "system" still match.
    return events.filter(actor_name=user) if user else events


def event_filter_choices() -> dict[str, list[str]]:
    return {
        "models": [m.name for m in catalog.model_list()],
        "users": sorted(set(audit.event_list().values_list("actor_name", flat=True)) - {""}),
        "actions": [value for value, _ in Event.Action.choices],
    }


def token_list() -> QuerySet[ApiToken]:
    return tokens.api_token_list(include_revoked=True).order_by("revoked_at", "-created_at")


def token_get(*, token_id: int) -> ApiToken:
    token = tokens.api_token_list(include_revoked=True).filter(pk=token_id).first()
    if token is None:
        raise Http404(f"There is no API token {token_id}.")
    return token


def replica_list() -> list[ServingReplica]:
    return list(serving.replica_list().order_by("-last_seen", "replica_id"))


def live_replicas() -> list[ServingReplica]:
    return list(serving.replica_list(max_age_s=LIVE_REPLICA_AGE_S))


def replica_is_live(replica: ServingReplica) -> bool:
    return replica.last_seen >= timezone.now() - timedelta(seconds=LIVE_REPLICA_AGE_S)


def replicas_serving(replicas: list[ServingReplica], model: str, numbers: set[int]) -> int:
    """How many replicas have one of ``numbers`` of ``model`` loaded and READY."""
    return sum(
        1
        for replica in replicas
        if any(
            v.get("model") == model
            and int(v.get("version") or 0) in numbers
            and v.get("state") == "READY"
            for v in replica.versions
        )
    )
