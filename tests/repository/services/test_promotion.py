"""Promote, roll back and approve: every allowed and refused state move."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from repository.errors import (
    ApprovalNotNeededError,
    ApprovalRequiredError,
    InvalidStateError,
    NothingToRollBackError,
    PermissionDeniedError,
    SelfApprovalError,
)
from repository.models import Event, ModelVersion, VersionState
from repository.services import (
    model_rollback,
    model_version_approve,
    model_version_promote,
    serving_revision_current,
)
from tests.factories import ModelFactory, ModelVersionFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def states(model) -> dict[int, str]:  # type: ignore[no-untyped-def]
    return dict(ModelVersion.objects.filter(model=model).values_list("number", "state"))


def test_promote_ready_version_retires_the_previous_one_and_bumps_revision(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory()
    v1 = ModelVersionFactory(model=model, number=1)
    v2 = ModelVersionFactory(model=model, number=2)
    before = serving_revision_current()
    model_version_promote(version=v1, actor=deployer)
    model_version_promote(version=v2, actor=deployer)
    assert states(model) == {1: "retired", 2: "promoted"}
    assert serving_revision_current() == before + 2
    event = Event.objects.filter(action="promote").first()
    assert (event.from_version, event.to_version, event.actor) == (1, 2, deployer)


def test_promote_retired_version_is_allowed(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory()
    v1 = ModelVersionFactory(model=model, number=1, state=VersionState.RETIRED)
    v2 = ModelVersionFactory(model=model, number=2, state=VersionState.PROMOTED)
    model_version_promote(version=v1, actor=deployer)
    assert states(model) == {1: "promoted", 2: "retired"}
    v1.refresh_from_db()
    assert v1.previous_promoted_id == v2.pk


@pytest.mark.parametrize(
    "state",
    [VersionState.FAILED, VersionState.UPLOADED, VersionState.VALIDATING, VersionState.PROMOTED],
)
def test_promote_from_other_states_is_refused_and_changes_nothing(deployer, state) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(state=state)
    before = serving_revision_current()
    with pytest.raises(InvalidStateError) as info:
        model_version_promote(version=version, actor=deployer)
    assert info.value.code == "invalid_state"
    assert info.value.extra["state"] == state
    version.refresh_from_db()
    assert version.state == state
    assert serving_revision_current() == before
    assert not Event.objects.filter(action="promote").exists()


def test_promote_of_a_failed_version_names_the_state(deployer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(state=VersionState.FAILED)
    with pytest.raises(InvalidStateError, match="it is failed"):
        model_version_promote(version=version, actor=deployer)


def test_code_bearing_version_needs_approval_before_promote(deployer, registry_admin) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(needs_approval=True, uploaded_by=deployer)
    with pytest.raises(ApprovalRequiredError):
        model_version_promote(version=version, actor=deployer)
    model_version_approve(version=version, actor=registry_admin)
    model_version_promote(version=version, actor=deployer)
    version.refresh_from_db()
    assert version.state == VersionState.PROMOTED
    assert version.approved_by == registry_admin
    assert Event.objects.filter(action="approve", actor=registry_admin).exists()


def test_approve_by_the_uploader_is_refused(registry_admin) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(needs_approval=True, uploaded_by=registry_admin)
    with pytest.raises(SelfApprovalError) as info:
        model_version_approve(version=version, actor=registry_admin)
    assert info.value.code == "self_approval"
    version.refresh_from_db()
    assert not version.approved


def test_approve_needs_the_admin_role(deployer, viewer) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(needs_approval=True, uploaded_by=viewer)
    with pytest.raises(PermissionDeniedError):
        model_version_approve(version=version, actor=deployer)


def test_approve_of_a_version_without_code_is_refused(registry_admin) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ApprovalNotNeededError):
        model_version_approve(version=ModelVersionFactory(), actor=registry_admin)


def test_approve_of_a_failed_version_is_refused(registry_admin) -> None:  # type: ignore[no-untyped-def]
    version = ModelVersionFactory(needs_approval=True, state=VersionState.FAILED)
    with pytest.raises(InvalidStateError):
        model_version_approve(version=version, actor=registry_admin)


def test_rollback_walks_back_along_the_promotion_history(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory()
    versions = [ModelVersionFactory(model=model, number=n) for n in (1, 2, 3)]
    for v in versions:
        model_version_promote(version=v, actor=deployer)
    assert model_rollback(model=model, actor=deployer).number == 2
    assert states(model) == {1: "retired", 2: "promoted", 3: "retired"}
    assert model_rollback(model=model, actor=deployer).number == 1
    assert states(model) == {1: "promoted", 2: "retired", 3: "retired"}
    with pytest.raises(NothingToRollBackError):
        model_rollback(model=model, actor=deployer)
    events = list(Event.objects.filter(action="rollback").order_by("id"))
    assert [(e.from_version, e.to_version) for e in events] == [(3, 2), (2, 1)]


def test_rollback_with_nothing_to_roll_back_to(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory()
    with pytest.raises(NothingToRollBackError, match="no version is promoted"):
        model_rollback(model=model, actor=deployer)
    model_version_promote(version=ModelVersionFactory(model=model, number=1), actor=deployer)
    before = serving_revision_current()
    with pytest.raises(NothingToRollBackError) as info:
        model_rollback(model=model, actor=deployer)
    assert info.value.code == "nothing_to_roll_back"
    assert info.value.extra["current"] == 1
    assert serving_revision_current() == before


def test_database_allows_only_one_promoted_version_per_model() -> None:
    model = ModelFactory()
    ModelVersionFactory(model=model, number=1, state=VersionState.PROMOTED)
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelVersionFactory(model=model, number=2, state=VersionState.PROMOTED)


def test_database_refuses_duplicate_version_numbers() -> None:
    model = ModelFactory()
    ModelVersionFactory(model=model, number=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelVersionFactory(model=model, number=1)


def test_rollback_from_a_version_no_longer_promoted_moves_nothing(deployer) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory()
    for n in (1, 2, 3):
        model_version_promote(version=ModelVersionFactory(model=model, number=n), actor=deployer)
    assert model_rollback(model=model, actor=deployer, from_version=3).number == 2
    # The same request again (a retry): v3 is no longer promoted, so v2 stays.
    assert model_rollback(model=model, actor=deployer, from_version=3).number == 2
    assert states(model) == {1: "retired", 2: "promoted", 3: "retired"}
    assert Event.objects.filter(action="rollback").count() == 1
