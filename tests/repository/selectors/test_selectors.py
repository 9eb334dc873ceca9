"""The registry's reads that the console pages and API share."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from repository import selectors
from repository.models import ServingReplica, VersionState
from repository.services import event_record
from tests.factories import ModelFactory, ModelVersionFactory, UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_model_list_searches_names_backends_and_descriptions() -> None:
    ModelFactory(name="resnet", backend="onnxruntime", description="images")
    ModelFactory(name="bert", backend="pytorch", description="text")
    torch = ModelFactory(name="mixed", backend="", description="")
    ModelVersionFactory(model=torch, number=1, backend="pytorch")
    ModelVersionFactory(model=torch, number=2, backend="pytorch")
    assert [m.name for m in selectors.model_list(query="torch")] == ["bert", "mixed"]
    assert [m.name for m in selectors.model_list(query="IMAGES")] == ["resnet"]


def test_model_list_can_carry_each_models_latest_event() -> None:
    quiet = ModelFactory(name="quiet")
    busy = ModelFactory(name="busy")
    event_record(actor=None, action="upload", model=busy, to_version=1)
    event_record(actor=None, action="promote", model=busy, to_version=1)
    models = {m.name: m for m in selectors.model_list(with_latest_event=True)}
    assert [e.action for e in models["busy"].recent_events] == ["promote"]
    assert models[quiet.name].recent_events == []


def test_event_list_after_returns_newer_events_of_the_asked_actions_oldest_first() -> None:
    model = ModelFactory(name="m")
    first = event_record(actor=None, action="promote", model=model, to_version=1)
    event_record(actor=None, action="upload", model=model, to_version=2)
    later = event_record(actor=None, action="rollback", model=model, to_version=1)
    found = selectors.event_list_after(after_id=0, actions=["promote", "rollback"])
    assert [e.pk for e in found] == [first.pk, later.pk]
    assert selectors.event_list_after(after_id=first.pk, actions=["promote"]) == []


def test_event_actor_names_and_actor_name_filter_include_deleted_users() -> None:
    gone = UserFactory(username="gone")
    event_record(actor=gone, action="upload")
    event_record(actor=None, action="upload")
    gone.delete()
    assert selectors.event_actor_names() == ["gone", "system"]
    assert selectors.event_list(actor_name="gone").count() == 1


def test_user_get_by_name_skips_inactive_users_unless_asked() -> None:
    user = UserFactory(username="sleepy")
    user.is_active = False
    user.save()
    assert selectors.user_get(username="sleepy") is None
    assert selectors.user_get(username="sleepy", include_inactive=True) == user
    with pytest.raises(ValueError):
        selectors.user_get()


def test_replica_ready_counts_count_ready_versions_and_skip_malformed_entries() -> None:
    now = timezone.now()
    replica = ServingReplica.objects.create(
        replica_id="r1",
        started_at=now,
        last_seen=now - timedelta(seconds=selectors.LIVE_REPLICA_MAX_AGE_S + 1),
        versions=[
            {"model": "m", "version": 1, "state": "READY"},
            {"model": "m", "version": 2, "state": "LOADING"},
            {"model": "m", "version": "x", "state": "READY"},
            "not a dict",
        ],
    )
    assert selectors.replica_ready_counts(replicas=[replica, replica]) == {("m", 1): 2}
    assert not selectors.replica_is_live(replica=replica)
    assert list(selectors.replica_list(max_age_s=selectors.LIVE_REPLICA_MAX_AGE_S)) == []


def test_allowed_actions_follow_the_promotion_rules(deployer, registry_admin) -> None:  # type: ignore[no-untyped-def]
    model = ModelFactory(name="m")
    ready = ModelVersionFactory(model=model, number=1, state=VersionState.READY)
    code = ModelVersionFactory(
        model=model, number=2, state=VersionState.READY, needs_approval=True, uploaded_by=deployer
    )
    failed = ModelVersionFactory(model=model, number=3, state=VersionState.FAILED)
    as_deployer = selectors.model_versions_allowed_actions(
        versions=[ready, code, failed], user=deployer
    )
    assert as_deployer[ready.pk] == {"promote": True, "approve": False, "awaits_approval": False}
    assert as_deployer[code.pk] == {"promote": False, "approve": False, "awaits_approval": True}
    assert as_deployer[failed.pk]["promote"] is False
    assert selectors.model_version_allowed_actions(version=code, user=registry_admin)["approve"]


def test_rollback_target_is_the_retired_version_the_promoted_one_replaced() -> None:
    model = ModelFactory(name="m")
    old = ModelVersionFactory(model=model, number=1, state=VersionState.RETIRED)
    current = ModelVersionFactory(
        model=model, number=2, state=VersionState.PROMOTED, previous_promoted=old
    )
    assert selectors.model_rollback_target(promoted=current) == old
    assert selectors.model_rollback_target(promoted=None) is None
    old.state = VersionState.FAILED
    assert selectors.model_rollback_target(promoted=current) is None
